"""The target on another machine through llama.cpp's RPC backend, the draft local:
a real `specdesk rpc-server` process on 127.0.0.1, real GGUF models, and every way a
server can fail ending in one line that names it."""

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading

import pytest

from clirun import cli, free_port

from specdesk.cli import main
from specdesk.engine import rpc as engine_rpc
from specdesk.session.remote import reinstall_command, rpc_supported

PY = sys.executable
needs_rpc = pytest.mark.skipif(not rpc_supported(), reason=f"llama.cpp built without RPC: {reinstall_command()}")


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("specdesk: note:")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def in_process(capsys, *argv) -> tuple[int, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse
        rc = e.code
    return rc, capsys.readouterr().err


# -- without the RPC backend: every RPC feature says how to get it -----------------------


@pytest.mark.parametrize("argv", [
    ["rpc-server", "--port", "1"],
    ["doctor", "--no-scan", "--rpc", "127.0.0.1:1"],
    ["generate", "--rpc", "127.0.0.1:1", "--prompt", "hi", "--proposer", "none"],
])
def test_a_build_without_rpc_says_how_to_reinstall(argv, smol_path, monkeypatch, capsys):
    monkeypatch.setattr(engine_rpc, "supported", lambda: False)
    extra = ["--target", smol_path] if argv[0] == "generate" else []
    rc, err = in_process(capsys, *argv, *extra)
    assert rc == 2
    line = one_line(err)
    assert "without llama.cpp's RPC backend" in line
    assert 'CMAKE_ARGS="-DGGML_RPC=ON"' in line and "--no-cache-dir" in line and "llama-cpp-python==" in line


def test_doctor_reports_whether_rpc_is_built_in(monkeypatch, capsys):
    monkeypatch.setattr(engine_rpc, "supported", lambda: False)
    assert main(["doctor", "--no-scan", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["rpc"] == {"supported": False, "fix": reinstall_command()}


# -- bad servers: one line naming the endpoint, never an abort or a hang -------------------


@pytest.mark.parametrize("text,needle", [
    ("nohost", "must be host:port"),
    ("host:notaport", "port must be a number"),
    ("host:70000", "port must be a number"),
    ("[::1]:50052", "takes no IPv6 address"),  # said "must be host:port" before, which it is
    ("fe80::1:50052", "takes no IPv6 address"),
])
def test_a_malformed_endpoint_is_one_line(text, needle, smol_path, capsys):
    rc, err = in_process(capsys, "generate", "--target", smol_path, "--rpc", text, "--prompt", "hi")
    assert rc == 2
    assert needle in one_line(err)


@needs_rpc
def test_a_refusing_server_is_named(smol_path, capsys):
    port = free_port()
    rc, err = in_process(capsys, "generate", "--target", smol_path, "--proposer", "none", "--rpc", f"127.0.0.1:{port}",
                         "--prompt", "hi")
    assert rc == 2
    line = one_line(err)
    assert f"RPC server 127.0.0.1:{port} refused the connection" in line


def _fake_server(answer):
    srv = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                c.recv(1 + 8 + 24)
                answer(c)

    threading.Thread(target=serve, daemon=True).start()
    return srv


@needs_rpc
def test_another_protocol_version_is_named(smol_path, capsys):
    srv = _fake_server(lambda c: c.sendall(struct.pack("<Q", 28) + bytes([6, 1, 0, 0]) + bytes(24)))
    ep = f"127.0.0.1:{srv.getsockname()[1]}"
    try:
        rc, err = in_process(capsys, "generate", "--target", smol_path, "--proposer", "none", "--rpc", ep, "--prompt", "hi")
    finally:
        srv.close()
    assert rc == 2
    line = one_line(err)
    assert f"RPC server {ep} speaks RPC protocol 6.1.0" in line and "7.0.0" in line


@needs_rpc
def test_a_server_that_hangs_up_on_the_handshake_is_named(capsys):
    srv = _fake_server(lambda c: None)  # reads the hello, closes: an older or newer protocol
    ep = f"127.0.0.1:{srv.getsockname()[1]}"
    try:
        rc, err = in_process(capsys, "doctor", "--no-scan", "--rpc", ep)
    finally:
        srv.close()
    assert rc == 2
    assert f"RPC server {ep} closed the connection during the handshake" in one_line(err)


@needs_rpc
def test_a_server_that_fails_after_the_handshake_is_named():
    """A server that answers SpecDesk's handshake and then closes on llama.cpp's first
    command: llama.cpp aborts while registering its devices. The line named no server
    ("RPC server ? stopped answering mid-generation") before. In a subprocess: the
    abort hook ends the process."""
    ok = struct.pack("<Q", 4 + 24) + bytes([*engine_rpc.PROTOCOL, 0]) + bytes(24)
    srv = _fake_server(lambda c: c.sendall(ok))  # then closes, whatever comes next
    ep = f"127.0.0.1:{srv.getsockname()[1]}"
    try:
        r = cli("doctor", "--no-scan", "--rpc", ep, timeout=120)
    finally:
        srv.close()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert f"RPC server {ep} stopped answering while its devices were being registered" in one_line(r.stderr)


@needs_rpc
def test_a_silent_server_times_out_instead_of_hanging(capsys):
    srv = socket.create_server(("127.0.0.1", 0))  # listens, never accepts: the handshake gets no answer
    ep = f"127.0.0.1:{srv.getsockname()[1]}"
    try:
        rc, err = in_process(capsys, "doctor", "--no-scan", "--rpc", ep)
    finally:
        srv.close()
    assert rc == 2
    assert f"RPC server {ep} accepted the connection but did not answer the handshake" in one_line(err)


# -- a real server -------------------------------------------------------------------


@pytest.fixture()
def rpc_server():
    """`specdesk rpc-server` in a subprocess on a free localhost port, until it said ready."""
    port = free_port()
    p = subprocess.Popen([PY, "-m", "specdesk", "rpc-server", "--port", str(port), "--threads", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = []
    # llama.cpp's own banner goes to the same stdout from the server's thread, so the
    # ready line need not begin a line; a server that never says it is killed, which
    # ends the loop (it once waited here for ever)
    watchdog = threading.Timer(120, p.kill)
    watchdog.start()
    for line in p.stdout:
        out.append(line)
        if "ready: on the client" in line:
            break
    else:
        p.kill()
        pytest.fail("rpc-server did not start: " + "".join(out) + p.stderr.read())
    watchdog.cancel()
    # keep draining its output so llama.cpp's prints never block the server
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    p.endpoint = f"127.0.0.1:{port}"
    p.banner = "".join(out)
    yield p
    if p.poll() is None:
        p.kill()
    p.wait(timeout=30)


@needs_rpc
def test_rpc_server_says_where_it_listens_what_it_serves_and_warns(rpc_server):
    assert f"listening on {rpc_server.endpoint}" in rpc_server.banner
    assert "serving CPU" in rpc_server.banner and "free of" in rpc_server.banner
    r = cli("rpc-server", "--port", rpc_server.endpoint.split(":")[1])  # the port is taken
    assert r.returncode == 2
    assert "cannot listen on 127.0.0.1" in r.stderr.splitlines()[-1]
    assert "no authentication and no encryption" in r.stderr


@needs_rpc
def test_remote_target_local_draft_matches_all_local_then_a_dead_server_is_one_line(rpc_server, smol_path,
                                                                                    smol_draft_path):
    common = ["generate", "--target", smol_path, "--draft", smol_draft_path, "--ctx", "512", "--threads", "1",
              "--prompt", "Write a short poem about the sea.", "--max-tokens", "48", "--k", "3"]
    local = cli(*common, "--json")
    assert local.returncode == 0, local.stderr
    remote = cli(*common, "--json", "--rpc", rpc_server.endpoint)
    assert remote.returncode == 0, remote.stderr
    assert f"RPC0 ({rpc_server.endpoint}" in remote.stderr and "the draft stays local" in remote.stderr
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    # the target's layers really were on the server, the draft's here
    assert b["memory"]["models"]["target"]["remote_bytes"] > 0
    assert b["memory"]["models"]["draft"]["remote_bytes"] == 0
    # SmolLM2 Q4_1 computes the same logits at every batch size (README), and the server
    # runs the same CPU kernels: greedy output is identical
    assert b["tokens"] == a["tokens"]
    assert b["stats"]["drafted"] > 0

    # now the server dies mid-generation
    gen = subprocess.Popen([PY, "-m", "specdesk", *map(str, common), "--max-tokens", "400", "--rpc", rpc_server.endpoint,
                            "--prompt", "Tell a very long story about a lighthouse keeper."],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = gen.stdout.read(1)  # the answer has started streaming
    assert first, gen.stderr.read()
    rpc_server.kill()
    rpc_server.wait(timeout=30)
    _, err = gen.communicate(timeout=120)
    assert gen.returncode == 2, err
    line = one_line(err)
    assert f"RPC server {rpc_server.endpoint}" in line
    assert "load the model again" in line


@needs_rpc
def test_a_load_shakes_hands_with_each_server_once_and_warns_only_of_local_gpu_layers(rpc_server, smol_path,
                                                                                      smol_draft_path, monkeypatch,
                                                                                      capsys):
    handshakes = []
    real_probe = engine_rpc.probe

    def counted(endpoint, *a, **kw):
        handshakes.append(endpoint)
        return real_probe(endpoint, *a, **kw)

    monkeypatch.setattr(engine_rpc, "probe", counted)
    rc, err = in_process(capsys, "generate", "--target", smol_path, "--rpc", rpc_server.endpoint, "--gpu-layers", "99",
                         "--proposer", "none", "--prompt", "hi", "--max-tokens", "2", "--ctx", "256", "--threads", "1")
    assert rc == 0, err
    # the note, the plan and the load share one handshake of SpecDesk's own before
    # llama.cpp talks to the server (it was four: two plans, each with a device check)
    assert handshakes == [rpc_server.endpoint]
    # the target's 99 layers went to the server's device, as asked: no warning about them
    assert "have no effect" not in err
    assert f"RPC0 ({rpc_server.endpoint}" in err
    # the draft stays here: its GPU layers on a CPU-only build are said to do nothing
    r = cli("generate", "--target", smol_path, "--draft", smol_draft_path, "--rpc", rpc_server.endpoint,
            "--gpu-layers", "99", "--draft-gpu-layers", "5", "--prompt", "hi", "--max-tokens", "2", "--ctx", "256",
            "--threads", "1")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "have no effect" in line]
    assert len(warnings) == 1 and "the draft's 5 GPU layers have no effect" in warnings[0]


@needs_rpc
def test_after_losing_a_server_the_process_loads_again(rpc_server, smol_path, tmp_path):
    """The app's case: the server dies under a running generation; the process lives on,
    is told which server it lost, and loads the model locally without a restart."""
    script = tmp_path / "reload.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, threading
        from specdesk.session import GenerationConfig, ModelSpec, Session
        from specdesk.session.remote import set_lost_handler
        lost = threading.Event(); why = []
        set_lost_handler(lambda m: (why.append(m), lost.set()))
        s = Session.load(ModelSpec({str(smol_path)!r}, n_ctx=512, threads=1, rpc=({rpc_server.endpoint!r},)),
                         remember_costs=False)
        cfg = GenerationConfig(proposer="none", max_tokens=400)
        def run():
            try:
                for _ in s.generate(s.raw_prompt("Once upon a time"), cfg):
                    print("STEP", flush=True)
            except Exception as e:  # the check between steps saw it first
                why.append(str(e)); lost.set()
        threading.Thread(target=run, daemon=True).start()
        assert lost.wait(120)
        print("LOST", why[0], flush=True)
        s2 = Session.load(ModelSpec({str(smol_path)!r}, n_ctx=512, threads=1), remember_costs=False)
        g = s2.run(s2.raw_prompt("Hello"), GenerationConfig(proposer="none", max_tokens=4))
        print("RELOADED", len(g.tokens), flush=True)
        sys.stdout.flush(); os._exit(0)
    """))
    p = subprocess.Popen([PY, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("STEP"), p.stderr.read()
    rpc_server.kill()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert f"LOST RPC server {rpc_server.endpoint}" in out
    assert "RELOADED 4" in out


def test_the_latency_proxy_passes_every_byte_both_ways():
    from specdesk.bench.latency_proxy import LatencyProxy

    srv = socket.create_server(("127.0.0.1", 0))

    def echo():
        c, _ = srv.accept()
        with c:
            while data := c.recv(4096):
                c.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    with LatencyProxy(srv.getsockname()[:2], 0.001, 0.002) as proxy:
        host, port = proxy.endpoint.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as c:
            payload = os.urandom(200_000)
            c.sendall(payload)
            got = b""
            while len(got) < len(payload):
                got += c.recv(65536)
    srv.close()
    assert got == payload


@needs_rpc
def test_the_rpc_benchmark_prints_its_table(tmp_path):
    """tools/rpc_bench.py on SmolLM2 (a smoke run, not a timed test): a real server
    behind the latency proxy at two delays, one row of ratios each."""
    tool = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "rpc_bench.py")
    r = subprocess.run([PY, tool, "--delays", "0,5", "--max-tokens", "12", "--prompts", "1"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| ") and " ms |" in ln]
    assert [ln.split("|")[1].strip() for ln in rows] == ["0 ms", "5 ms"]
    for ln in rows:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert float(cells[2].split()[0]) > 0  # verify b=4 per token, in target steps
        assert cells[3].endswith("×") and float(cells[3][:-1]) > 0
