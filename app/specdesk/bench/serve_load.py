"""Load on an OpenAI-compatible endpoint (``specdesk serve``, or any server that answers
``/v1/chat/completions``): M concurrent clients × R streamed chat completions, and what
a user of the endpoint sees (``specdesk serve-load``).

Each client is a thread with its own HTTP connection per request (the standard
library's client: streamed server-sent events, read as they come). Per request: its
status (ok, refused with 503, another error), the time to its first token, and from the
last chunk what the server says it did (``timings``: the time it waited in line, decode
speed, prompt and decode milliseconds; ``speculation``: acceptance). :func:`summarize`
turns them into one report (throughput, percentiles, the share of the wall time the
pair was busy); the words for it are in :mod:`specdesk.session.text`.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

import psutil

from ..errors import SpecDeskError

PROMPTS = (
    "Write a Python function that reverses a string.",
    "List three uses of a hash map.",
    "Explain what a B-tree is in two sentences.",
    "Count from one to ten in words.",
)
#: Seconds a request may take before it counts as an error (an answer is not timed by the server).
REQUEST_TIMEOUT_S = 600.0


@dataclass
class Result:
    client: int
    index: int
    status: str  # "ok" | "503" | "error: ..."
    seconds: float
    ttft: float | None = None
    completion_tokens: int = 0
    queue_ms: float | None = None
    decode_tps: float | None = None
    acceptance: float | None = None
    prompt_ms: float | None = None
    decode_ms: float | None = None


@dataclass(frozen=True)
class Endpoint:
    """Where the server is and the key it wants: ``http://host:port`` (a ``/v1`` at the
    end is the API's, not the server's)."""

    url: str
    key: str | None = None

    @staticmethod
    def parse(url: str, key: str | None = None) -> "Endpoint":
        u = urlsplit(url.strip())
        if u.scheme not in ("http", "https") or not u.hostname:
            raise SpecDeskError(f"the server's URL must be http://HOST:PORT or https://HOST:PORT, got {url!r}")
        try:
            _ = u.port  # raises on a port that is not a number from 0 to 65535
        except ValueError:
            raise SpecDeskError(f"the server's URL has no valid port: {url!r}") from None
        path = u.path.rstrip("/").removesuffix("/v1")
        return Endpoint(f"{u.scheme}://{u.netloc}{path}", key)

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        u = urlsplit(self.url)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        return cls(u.hostname, u.port, timeout=timeout)

    def _headers(self) -> dict:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.key:
            h["Authorization"] = f"Bearer {self.key}"
        return h

    def model(self, timeout: float = 60.0) -> str:
        """The first model ``/v1/models`` lists; a server that cannot be reached, refuses
        the key or lists none is one clear error."""
        conn = self._connection(timeout)
        try:
            conn.request("GET", urlsplit(self.url).path + "/v1/models", headers=self._headers())
            r = conn.getresponse()
            body = r.read()
        except (OSError, http.client.HTTPException) as e:
            why = (e.strerror if isinstance(e, OSError) else None) or str(e) or type(e).__name__
            raise SpecDeskError(f"cannot reach the server at {self.url}: {why}") from None
        finally:
            conn.close()
        if r.status in (401, 403):
            raise SpecDeskError(f"the server at {self.url} refused the API key ({r.status}): give it with --api-key")
        try:
            return json.loads(body)["data"][0]["id"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise SpecDeskError(f"the server at {self.url} lists no model at /v1/models (HTTP {r.status})") from None

    def chat(self, model: str, prompt: str, max_tokens: int, temperature: float, client: int = 0, index: int = 0,
             timeout: float = REQUEST_TIMEOUT_S) -> Result:
        """One streamed chat completion, timed from the request's start."""
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                           "temperature": temperature, "stream": True, "stream_options": {"include_usage": True}})
        t0 = time.perf_counter()
        conn = self._connection(timeout)
        try:
            conn.request("POST", urlsplit(self.url).path + "/v1/chat/completions", body=body, headers=self._headers())
            r = conn.getresponse()
            if r.status != 200:
                r.read()
                return Result(client, index, "503" if r.status == 503 else f"error: {r.status}", time.perf_counter() - t0)
            ttft, final, usage = _read_stream(r, t0)
        except (OSError, http.client.HTTPException, ValueError) as e:
            return Result(client, index, f"error: {type(e).__name__}", time.perf_counter() - t0)
        finally:
            conn.close()
        t = (final or {}).get("timings") or {}
        s = (final or {}).get("speculation") or {}
        return Result(client, index, "ok", time.perf_counter() - t0, ttft, int((usage or {}).get("completion_tokens") or 0),
                      t.get("queue_ms"), t.get("predicted_per_second"), s.get("acceptance_rate"), t.get("prompt_ms"),
                      t.get("predicted_ms"))


def _read_stream(r: http.client.HTTPResponse, t0: float) -> tuple[float | None, dict | None, dict | None]:
    """(seconds to the first content, the chunk that finished the answer, the usage)
    of a stream of server-sent events."""
    ttft = final = usage = None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        choices = chunk.get("choices") or []
        if choices and (choices[0].get("delta") or {}).get("content") and ttft is None:
            ttft = time.perf_counter() - t0
        if choices and choices[0].get("finish_reason"):
            final = chunk
        if chunk.get("usage"):
            usage = chunk["usage"]
    return ttft, final, usage


def run_load(ep: Endpoint, model: str, clients: int, requests: int, max_tokens: int, temperature: float,
             pause: float) -> tuple[list[Result], float]:
    """``clients`` threads that start together, each sending ``requests`` in turn (a
    refused one waits ``pause`` seconds before its next); (every result, wall seconds)."""
    results: list[Result] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def worker(i: int) -> None:
        barrier.wait()
        for r in range(requests):
            res = ep.chat(model, PROMPTS[(i + r) % len(PROMPTS)], max_tokens, temperature, i, r)
            with lock:
                results.append(res)
            if res.status == "503" and pause:
                time.sleep(pause)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - t0


def rss(pid: int | None) -> int | None:
    """A process's resident memory in bytes (None: not known or gone)."""
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return None


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(results: list[Result], wall: float, clients: int, requests: int, max_tokens: int,
              before: int | None = None, after: int | None = None) -> dict:
    """The load's report as a JSON-ready dict (every request included)."""
    ok = [r for r in results if r.status == "ok"]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    waits = [r.queue_ms / 1000 for r in ok if r.queue_ms is not None]
    speeds = [r.decode_tps for r in ok if r.decode_tps]
    per_client = [sum(r.completion_tokens for r in ok if r.client == i) / wall for i in range(clients)] if wall > 0 else []
    throughput = sum(r.completion_tokens for r in ok) / wall if wall > 0 else None
    median_speed = statistics.median(speeds) if speeds else None

    def share(ms: list[float | None]) -> float | None:
        return sum(x or 0 for x in ms) / 1000 / wall if wall > 0 else None

    return {
        "clients": clients, "requests_per_client": requests, "max_tokens": max_tokens,
        "wall_s": wall, "ok": len(ok), "rejected_503": sum(r.status == "503" for r in results),
        "errors": sorted({r.status for r in results if r.status.startswith("error")}),
        "error_count": sum(r.status.startswith("error") for r in results),
        "throughput_tokens_per_s": throughput, "requests_per_s": len(ok) / wall if wall > 0 else None,
        "per_client_tokens_per_s": {"min": min(per_client, default=None), "max": max(per_client, default=None)},
        "ttft_s": {"p50": pct(ttft, 0.5), "p95": pct(ttft, 0.95), "min": min(ttft, default=None), "max": max(ttft, default=None)},
        "queue_wait_s": {"p50": pct(waits, 0.5), "p95": pct(waits, 0.95), "max": max(waits, default=None)},
        "decode_tokens_per_s": {"p50": median_speed, "min": min(speeds, default=None), "max": max(speeds, default=None)},
        "throughput_over_median_decode": throughput / median_speed if throughput and median_speed else None,
        # how the wall time went: the pair evaluating prompts, decoding, or neither (HTTP, templates, hand-over)
        "busy_share": {"prompt": share([r.prompt_ms for r in ok]), "decode": share([r.decode_ms for r in ok])},
        "acceptance": {"p50": pct([r.acceptance for r in ok if r.acceptance is not None], 0.5)},
        "server_rss_bytes": {"before": before, "after": after, "delta": after - before if before and after else None},
        "results": [asdict(r) for r in results],
    }
