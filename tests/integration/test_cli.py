"""The command line, as a user runs it: a real process, real files, exit codes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import assert_one_line_error, cli

PY = sys.executable


@pytest.fixture(scope="module")
def smol_args(smol_path, smol_draft_path):
    return ["--target", smol_path, "--draft", smol_draft_path, "--ctx", "512", "--threads", "2"]


def test_generate_json_has_text_tokens_stats_memory(smol_args):
    r = cli("generate", *smol_args, "--prompt", "Say hello.", "--k", "3", "--max-tokens", "16", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["text"] and len(out["tokens"]) == out["stats"]["generated"] <= 16
    for key in ("drafted", "accepted", "acceptance_rate", "mean_accepted_length", "drafted_per_position",
                "accepted_per_position", "steps", "generated", "tokens_per_second", "decode_seconds",
                "draft_seconds", "verify_seconds", "overhead_seconds"):
        assert key in out["stats"], key
    assert set(out["memory"]["models"]) == {"target", "draft"}


def test_generate_streams_text_and_summarises_on_stderr(smol_args):
    r = cli("generate", *smol_args, "--prompt", "Count from one to five.", "--max-tokens", "12", "--proposer", "ngram")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "tok/s" in r.stderr and "stop:" in r.stderr


def test_compare_json_reports_speedup_and_identity(smol_args):
    r = cli("compare", *smol_args, "--prompt", "Write a haiku about rain.", "--k", "2", "--max-tokens", "24", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["speedup"] > 0
    # the pair's statistics, as bench reports them per configuration: 3 interleaved repeats by default
    assert out["config"] == "draft:k=2" and out["pairs"] == 3 and out["stopping"]["repeats"] == 3
    lo, hi = out["speedup_ci"]
    assert lo < out["speedup"] < hi and out["detectable"] > 0
    assert out["verdict"] == ("faster" if lo > 1 else "slower" if hi < 1 else "within-noise")
    assert out["compared_runs"] == 3 and 0 <= out["identical_runs"] <= 3
    assert out["baseline"]["stats"]["drafted"] == 0
    assert out["speculative"]["stats"]["drafted"] > 0
    assert "draft" not in out["baseline"]["memory"]["models"]
    assert isinstance(out["identical"], bool)
    if not out["identical"]:
        d = out["divergence"]
        assert d["verdict"] in ("near-tie", "mismatch") and d["margin"] >= 0 and "index" in d
        assert "drift" in d["explanation"] or d["verdict"] in d["explanation"]
    # the identity claim comes with its measured boundary
    assert out["drift"]["by_batch"] and "verify batch" in out["exactness"]


def test_compare_prints_side_by_side(smol_args):
    r = cli("compare", *smol_args, "--prompt", "Name three planets.", "--k", "2", "--max-tokens", "16", "--repeats", "2")
    assert r.returncode == 0, r.stderr
    assert "target alone" in r.stdout and "speculative (draft:k=2)" in r.stdout and "identical at T=0" in r.stdout
    assert "95% interval" in r.stdout and "over 2 pairs" in r.stdout


def test_check_pair_exit_codes(smol_path, smol_draft_path, qwen_draft_path):
    assert cli("models", "check-pair", smol_path, smol_draft_path).returncode == 0
    r = cli("models", "check-pair", qwen_draft_path, smol_path)
    assert_one_line_error(r, "special tokens differ")


def test_missing_file(tmp_path, smol_path):
    r = cli("generate", "--target", tmp_path / "nope.gguf", "--draft", smol_path, "--prompt", "x")
    assert_one_line_error(r, "nope.gguf")


def test_not_a_gguf(tmp_path, smol_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("just some text, not a model\n")
    r = cli("generate", "--target", bad, "--draft", smol_path, "--prompt", "x")
    assert_one_line_error(r, "notes.gguf", "GGUF")


def test_truncated_gguf(tmp_path, smol_path):
    cut = tmp_path / "cut.gguf"
    with open(smol_path, "rb") as f:
        cut.write_bytes(f.read(30_000_000))
    r = cli("generate", "--target", cut, "--draft", smol_path, "--prompt", "x")
    assert_one_line_error(r, "cut.gguf", "truncated")


def test_incompatible_draft_with_same_vocab_only(smol_path, qwen_draft_path):
    r = cli("generate", "--target", qwen_draft_path, "--draft", smol_path, "--prompt", "x", "--ctx", "256",
            "--same-vocab-only")
    assert_one_line_error(r, "incompatible", "BOS")


def test_a_draft_with_another_vocabulary_drafts_translated(smol_path, qwen_draft_path):
    """Without --same-vocab-only an incompatible pair loads as a translated pair, says
    so, and its answer at T=0 is target alone's."""
    common = ["--target", qwen_draft_path, "--prompt", "Name three colours.", "--ctx", "512", "--max-tokens", "12",
              "--json"]
    r = cli("generate", *common, "--draft", smol_path, "--proposer", "draft", "--k", "3")
    assert r.returncode == 0, r.stderr
    assert "another vocabulary" in r.stderr and "--same-vocab-only" in r.stderr
    out = json.loads(r.stdout)
    alone = json.loads(cli("generate", *common, "--proposer", "none").stdout)
    assert out["tokens"] == alone["tokens"]
    assert out["stats"]["drafted"] > 0


def test_models_drafts_lists_translated_candidates(smol_path, qwen_target_path, qwen_draft_path, tmp_path, monkeypatch):
    """A library of the default pair and SmolLM2: the 0.5B drafts in the target's
    vocabulary, SmolLM2 translated, each with its place and cost estimate."""
    lib = tmp_path / "models"
    lib.mkdir()
    for p in (smol_path, qwen_target_path, qwen_draft_path):
        (lib / Path(p).name).symlink_to(p)
    for var in ("OLLAMA_MODELS", "HF_HOME", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("SPECDESK_MODELS_DIR", str(lib))
    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))
    r = cli("models", "drafts", lib / Path(qwen_target_path).name, "--json")
    assert r.returncode == 0, r.stderr
    got = [(Path(c["path"]).name, c["kind"]) for c in json.loads(r.stdout)]
    assert got == [(Path(qwen_draft_path).name, "same vocabulary"), (Path(smol_path).name, "translated")]
    r = cli("models", "drafts", lib / Path(qwen_target_path).name)
    assert r.returncode == 0 and "2 of 2 models can draft" in r.stdout
    assert "translated" in r.stdout and "target steps by size" in r.stdout


def test_prompt_longer_than_context(smol_args):
    r = cli("generate", *smol_args[:-4], "--ctx", "64", "--prompt", "word " * 300)
    # the size that holds, and why it is not the one asked for
    assert_one_line_error(r, "context holds 256", "rounds the 64 asked for up")
    r = cli("generate", *smol_args[:-4], "--ctx", "256", "--prompt", "word " * 300)
    assert_one_line_error(r, "context holds 256;")
    r = cli("generate", *smol_args[:-4], "--ctx", "300", "--prompt", "word " * 200, "--max-tokens", "400")
    assert_one_line_error(r, "max tokens 400", "> 512 (llama.cpp rounds the 300 asked for up")


def test_max_tokens_past_context(smol_args):
    r = cli("generate", *smol_args, "--prompt", "hello", "--max-tokens", "5000")
    assert_one_line_error(r, "max tokens", "context")


@pytest.mark.parametrize("k", ["0", "-3", "two"])
def test_bad_k(smol_args, k):
    assert_one_line_error(cli("generate", *smol_args, "--prompt", "x", "--k", k), "k must be")


def test_negative_temperature(smol_args):
    assert_one_line_error(cli("generate", *smol_args, "--prompt", "x", "--temp", "-0.5"), "temperature")


def test_no_half_written_files_after_errors(tmp_path, smol_path):
    before = set(os.listdir(tmp_path))
    cli("generate", "--target", tmp_path / "nope.gguf", "--prompt", "x")
    assert set(os.listdir(tmp_path)) == before


def test_fetch_default_does_nothing_when_files_are_verified():
    r = cli("models", "fetch-default", "--test-model", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "already in place" in r.stderr


def test_doctor_json_lists_the_devices_and_says_what_gpu_layers_do():
    import json

    r = cli("doctor", "--json", "--no-scan", timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    cpu = [x for x in d["devices"] if x["kind"] == "CPU"]
    assert cpu and cpu[0]["total_bytes"] > 0 and 0 < cpu[0]["free_bytes"] <= cpu[0]["total_bytes"]
    assert "CPU" in d["llama_cpp"]["backends"] and d["llama_cpp"]["llama_cpp_python"]
    assert d["ram"]["total_bytes"] > 0 and {"models", "data", "cache"} <= set(d["folders"])
    assert {m["role"] for m in d["default_pair"]} == {"target", "draft"}
    # an AMX build says its extra weight buffers are off (its kernels can crash), and only it
    assert (d["llama_cpp"]["extra_buffers_off"] is not None) == ("AMX_INT8" in d["llama_cpp"]["cpu_features"])
    g = d["gpu_offload"]
    if not g["supported"]:  # a CPU-only build (as here): GPU layers are flagged as doing nothing, with the fix
        assert "ignored" in g["gpu_layers_effect"] and "CMAKE_ARGS" in g["fix"]
        assert not any(x["is_gpu"] for x in d["devices"])


def test_gpu_layers_on_a_cpu_build_are_said_to_do_nothing(smol_path):
    import json

    r = cli("models", "inspect", smol_path, "--gpu-layers", "8", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    if info["gpu_offload"]:
        pytest.skip("this llama.cpp can offload to a GPU")
    assert "no effect" in r.stderr and r.stderr.count("\n") == 1
    assert info["memory"]["vram_bytes"] == 0  # the estimate follows what llama.cpp will really do


@pytest.fixture(scope="module")
def nan_model(smol_path, tmp_path_factory):
    """SmolLM2 with its output norm's weights set to NaN: a damaged file that loads and
    computes NaN logits (the reader checks the structure, not the numbers)."""
    import gguf
    import numpy as np

    t = next(t for t in gguf.GGUFReader(smol_path).tensors if t.name == "output_norm.weight")
    dst = tmp_path_factory.mktemp("nan") / "smol-nan.gguf"
    data = bytearray(Path(smol_path).read_bytes())
    data[t.data_offset:t.data_offset + t.n_bytes] = np.full(t.n_elements, np.nan, np.float32).tobytes()
    dst.write_bytes(bytes(data))
    return dst


@pytest.mark.parametrize("temp", ["1", "0"])
def test_a_model_that_computes_nan_stops_the_answer_with_one_line(smol_path, nan_model, temp):
    """A NaN draft bent the sampler at T>0 (every probability NaN, so every draw the last
    token: the answer was `ectableectable...`, not the target's) and a NaN target answered
    noise; now each is one line naming the model, exit 2."""
    r = cli("generate", "--target", smol_path, "--draft", nan_model, "--prompt", "Hi", "--max-tokens", "12", "--k", "4",
            "--p-min", "0", "--temp", temp, "--threads", "2")
    assert_one_line_error(r, "the draft model", "not numbers (NaN")
    assert not r.stdout.strip()
    r = cli("generate", "--target", nan_model, "--proposer", "none", "--prompt", "Hi", "--max-tokens", "12",
            "--temp", temp, "--threads", "2")
    assert_one_line_error(r, "the target model", "not numbers (NaN")


def test_a_prompt_that_is_not_utf8_is_one_line(smol_path):
    """Bytes that are not UTF-8 on the command line reached the tokenizer as lone
    surrogates: a UnicodeEncodeError traceback."""
    r = subprocess.run([PY, "-m", "specdesk", "generate", "--target", str(smol_path), "--prompt", b"\xff\xfe bad"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "--prompt is not UTF-8 text: character 0 is the byte ff" in r.stderr


def test_a_model_whose_file_name_is_not_utf8_loads(smol_path, tmp_path):
    """The path goes to llama.cpp as the file system's own bytes (it was encoded as UTF-8:
    a traceback for a name that is not)."""
    link = os.fsencode(tmp_path) + b"/smol-\xff.gguf"
    os.symlink(os.fsencode(smol_path), link)
    r = subprocess.run([PY, "-m", "specdesk", "generate", "--target", link, "--proposer", "none", "--prompt", "Hi",
                        "--max-tokens", "2", "--threads", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def _foreground_ctrl_c() -> None:
    """In the child, before it runs: Ctrl+C as a terminal's foreground command gets it.
    A shell that starts a command in the background (``cmd &`` without job control)
    ignores SIGINT for it, and an ignored signal stays ignored across exec: a test suite
    run that way had its CLI ignore the Ctrl+C the test sent (it loaded, answered all
    64 tokens and exited 0), as any program there would."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_the_model_loads_stops_the_command(smol_path):
    """Ctrl+C while llama.cpp loads stops the command with one line and 130, as it does
    while generating, and nothing is answered.

    Not timed: the child's stderr is a pipe of one page that this test stops reading at
    the first ``llama_model_loader`` line, so the child blocks inside the load on its
    next page of log (the load logs more than that before its first tensor, checked
    below) until the test, having sent Ctrl+C, reads again."""
    import fcntl
    import signal

    read_end, write_end = os.pipe()
    pipe_size = fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    try:
        p = subprocess.Popen([PY, "-m", "specdesk", "--verbose", "generate", "--target", str(smol_path), "--proposer",
                              "none", "--prompt", "Write a long story about a cat.", "--max-tokens", "64"],
                             stdout=subprocess.PIPE, stderr=write_end, preexec_fn=_foreground_ctrl_c)
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb", buffering=0) as err_pipe:
        before = bytearray()
        while not before.endswith(b"\n") or b"llama_model_loader" not in before.rsplit(b"\n", 2)[-2]:
            b = err_pipe.read(1)  # a byte at a time: nothing past the line leaves the pipe
            assert b, f"the command ended before loading: {before.decode(errors='replace')[-2000:]}"
            before += b
        p.send_signal(signal.SIGINT)  # the load has begun, and cannot end before the test reads again
        after = err_pipe.read()
    out = p.stdout.read()
    assert p.wait(timeout=300) == 130, (p.returncode, after.decode(errors="replace")[-2000:])
    err = after.decode(errors="replace")
    assert err.rstrip().endswith("specdesk: interrupted") and "Exception ignored" not in err, err[-2000:]
    assert not out.strip(), "an answer was generated after Ctrl+C"
    # the premise: the load had to write more than the pipe holds after that line (so it was
    # still loading when Ctrl+C came), and it was stopped before its tensors were loaded
    loader_log = err.split("load_tensors:", 1)[0]
    assert len(loader_log.encode()) > pipe_size, len(loader_log)
    assert "llama_context" not in err


def test_ctrl_c_inside_a_llama_cpp_callback_is_kept_and_raised_at_the_next_check(smol_path, capfd):
    """Python runs a Ctrl+C's handler at the next bytecode, which during a native call is
    inside llama.cpp's log callback, where ctypes prints and drops a KeyboardInterrupt:
    outside a load, the command ran on. Under the CLI's guard it is kept there and
    raised once the call has returned (here: freeing the models, which logs)."""
    import logging
    import signal

    from specdesk.session import ModelSpec, Session, ctrl_c_guard, interrupted

    class CtrlCOnce(logging.Handler):
        fired = False

        def emit(self, record) -> None:  # runs inside llama.cpp's log callback
            if not self.fired:
                self.fired = True
                signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a foreground command's Ctrl+C
    log = logging.getLogger("llama.cpp")
    level = log.level
    s = Session.load(ModelSpec(smol_path, n_ctx=256), None)
    hook = CtrlCOnce()
    kept = []
    try:
        log.setLevel(logging.DEBUG)
        log.addHandler(hook)
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c_guard():
                s.close()  # llama.cpp logs as it frees the context: Ctrl+C lands in the callback
                kept.append(interrupted())
    finally:
        log.removeHandler(hook)
        log.setLevel(level)
        signal.signal(signal.SIGINT, previous)
        s.close()
    assert hook.fired and kept == [True]
    assert "Exception ignored" not in capfd.readouterr().err
    assert not interrupted()  # raised once


@pytest.mark.parametrize("ctx,words", [("1000000000", "needs about"), ("4294967552", "more than llama.cpp takes")])
def test_a_context_no_machine_holds_is_refused_before_it_is_allocated(smol_path, ctx, words):
    """A billion-token context took 20 GB and 80 s to fail, and one past 2^32 wrapped
    silently to 256 tokens: both are one line before llama.cpp allocates anything."""
    r = cli("generate", "--target", smol_path, "--proposer", "none", "--prompt", "Hi", "--max-tokens", "2", "--ctx", ctx)
    assert_one_line_error(r, f"a context of {ctx} tokens", words)


def test_more_threads_than_cpus_gets_a_note(smol_path):
    """1000 threads on 2 CPUs ran at a seven-hundredth of the speed without a word."""
    n = (os.cpu_count() or 1) + 1
    r = cli("generate", "--target", smol_path, "--proposer", "none", "--prompt", "Hi", "--max-tokens", "2", "--threads", n)
    assert r.returncode == 0, r.stderr
    assert f"--threads {n} is more than this machine's {n - 1} CPUs" in r.stderr


def test_models_inspect_shows_hostile_metadata_as_escapes(smol_path, tmp_path):
    """A GGUF's name with an escape sequence, a newline and a NUL went to the terminal as
    they were (clearing the screen, splitting the output's lines)."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "data" / "gguf"))
    from gguf import GGUFValueType as VT
    from tiny_gguf import rebuild_gguf

    evil = "evil\x1b[2J\x1b[31mRED\nnewline\x00nul"
    f = rebuild_gguf(smol_path, tmp_path / "evil.gguf", set_kv={"general.name": (VT.STRING, evil)})
    r = cli("models", "inspect", f)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x00" not in r.stdout
    assert "evil\\x1b[2J\\x1b[31mRED\\nnewline\\x00nul" in r.stdout
