"""What this project's llama.cpp does with a GGUF file when nothing guards it.

``probe(path)`` runs this file as a script in a child process (with an address-space
limit and a timeout, since the point is to see it abort or hang) and returns one of:

* ``"ok"``: the model loads, and tokenizing (add_special=True, parse_special True and
  False, as SpecDesk does) a few texts, turning every token of the vocabulary and of
  the results into its piece, and decoding the tokens in a context all work;
* ``"refuses"``: llama_model_load_from_file returns NULL (llama.cpp's own error);
* ``"error"``: a llama_decode or llama_tokenize call returns an error code;
* ``"abort"``: the process dies on a signal (GGML_ASSERT, an uncaught C++ exception);
* ``"out of memory"``: it dies of an uncaught std::bad_alloc, having used the address
  space it is allowed (what a loop that never ends and keeps allocating comes to,
  before or after the timeout depending on the machine's speed);
* ``"hang"``: it runs past the timeout.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

TEXTS = ["hi", "Hello, world!\n", "caf\u00e9 \u4e2d\u6587 \U0001f600 \u00c5", "<|im_start|>user\nhi<|im_end|>\n",
         "A\tb\x01 ~\x7f", ""]


def probe(path: str | Path, *, timeout: float = 20.0, address_space: int = 4 << 30) -> str:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    try:
        p = subprocess.run([sys.executable, str(Path(__file__).resolve()), str(path)], capture_output=True,
                           text=True, timeout=timeout, env=env, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        return "hang"
    if p.returncode < 0 or p.returncode == 134:
        return "out of memory" if "std::bad_alloc" in p.stderr else "abort"
    last = (p.stdout.strip().splitlines() or ["?"])[-1]
    return last if last in ("ok", "refuses", "error") else f"exit {p.returncode}: {p.stderr[-300:]}"


def main(path: str) -> int:
    import ctypes

    import llama_cpp

    @llama_cpp.llama_log_callback
    def quiet(level, text, user_data):  # noqa: ARG001 - ctypes callback signature
        return None

    llama_cpp.llama_log_set(quiet, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    if b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info():
        # as SpecDesk's loader (specdesk.engine.model.amx_compiled): llama.cpp's AMX
        # kernels can crash on any batch, which would hide what the file itself does
        mparams.use_extra_bufts = False
    model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
    if not model:
        print("refuses", flush=True)
        return 0
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    piece = ctypes.create_string_buffer(256)
    for t in range(n_vocab):
        llama_cpp.llama_token_to_piece(vocab, t, piece, 256, 0, True)
    prompt: list[int] = []
    for text in TEXTS:
        data = text.encode()
        for parse_special in (True, False):
            buf = (llama_cpp.llama_token * (len(data) + 16))()
            n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, len(data) + 16, True, parse_special)
            if n < 0:
                print("error", flush=True)
                return 0
            ids = list(buf[:n])
            for t in ids:
                llama_cpp.llama_token_to_piece(vocab, t, piece, 256, 0, True)
            prompt += ids
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = 512
    params.n_batch = 512
    ctx = llama_cpp.llama_init_from_model(model, params)
    prompt = prompt[:256]
    ids = (llama_cpp.llama_token * len(prompt))(*prompt)  # kept alive until the decode is done
    batch = llama_cpp.llama_batch_get_one(ids, len(prompt))
    rc = llama_cpp.llama_decode(ctx, batch)
    print("ok" if rc == 0 else "error", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
