"""``specdesk serve``: an OpenAI-compatible HTTP server over one loaded pair.

- ``queue``: one generation at a time, a bounded FIFO (no web framework: the app's
  chat answers wait in the same line);
- ``schemas``: the request bodies, validated by pydantic, and what this server refuses;
- ``openai``: the response bodies and stream chunks, with ``usage``, llama-server's
  ``timings`` and a ``speculation`` object;
- ``stops``: stop strings cut out of a stream;
- ``generation``: one admitted request, run on its own thread and read by the handler;
- ``metrics``: ``/metrics`` with prometheus_client;
- ``guard``: the API key, the body size limit and per-status counts, as ASGI middleware;
- ``app``: the FastAPI app factory; ``runner``: uvicorn, in the foreground or a thread;
- ``deadline``: uvicorn's HTTP/1.1 protocol with a deadline for reading each request.

Only ``queue`` (and this package, with its defaults) may be imported without FastAPI installed.
"""

#: Seconds a client has to send a whole request, headers and body (``specdesk serve --request-timeout``).
REQUEST_TIMEOUT_S = 60.0
