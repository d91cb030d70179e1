"""A model's chat template, rendered safely: the GGUF's Jinja template comes from the
internet with the model.

``sandbox``  the first filter: Jinja's sandbox with a step, time and size budget that
             refuses values before they are built;
``worker``   the bound the operating system enforces: a long-lived helper process with a
             memory limit and a deadline, killed and restarted on a breach.

No llama.cpp and no Qt (import contracts keep it so): the session renders a chat here
and tokenizes the text with the target.
"""
