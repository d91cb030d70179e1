"""``specdesk serve-load`` and ``specdesk drift`` as a user runs them, on SmolLM2: the load
starts its own server (or loads a running one with its key), reports every request and
stops the server; the drift's control shows none; bad input is one line and exit 2
(checked in this process: the command line's own parsing, no model loaded)."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest
from clirun import assert_one_line_error, cli, free_port
from serving import start_serve

from specdesk.cli import main


def _serve_args(smol_path) -> list:
    return ["--target", smol_path, "--draft", smol_path, "--k", "2", "--ctx", "512", "--threads", "1"]


def test_serve_load_starts_a_server_loads_it_and_stops_it(smol_path, tmp_path):
    out = tmp_path / "load.json"
    r = cli("serve-load", "--clients", 2, "--requests", 2, "--max-tokens", 6, "--json", out, "--", *_serve_args(smol_path))
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert (report["ok"], report["rejected_503"], report["error_count"]) == (4, 0, 0)
    assert sorted((q["client"], q["index"]) for q in report["results"]) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for q in report["results"]:
        assert 0 < q["completion_tokens"] <= 6 and 0 < q["ttft"] <= q["seconds"]
        assert q["acceptance"] is not None and q["queue_ms"] is not None  # what the server said it did
    assert report["throughput_tokens_per_s"] > 0 and report["server_rss_bytes"]["before"] > 0
    assert "2 clients x 2 requests, max_tokens 6: 4 ok, 0 refused (503), 0 errors" in r.stdout
    assert "first token" in r.stdout and "server RSS" in r.stdout
    url = r.stderr.split(" at ")[-1].strip()  # "specdesk serve-load: started specdesk serve ... at URL"
    with pytest.raises(OSError):  # the server it started is gone
        socket.create_connection((urlsplit(url).hostname, urlsplit(url).port), timeout=5).close()


def test_serve_load_on_a_running_server_needs_its_key(smol_path, tmp_path):
    served = start_serve(_serve_args(smol_path), tmp_path, key="k-123")
    try:
        args = ("serve-load", "--url", served.url, "--clients", 1, "--requests", 1, "--max-tokens", 4)
        r = cli(*args, "--api-key", "k-123", "--pid", served.proc.pid)
        assert r.returncode == 0, r.stderr
        assert "1 ok" in r.stdout and "server RSS" in r.stdout
        assert_one_line_error(cli(*args, "--api-key", "wrong"), "refused the API key")
    finally:
        served.stop()


def one_line_error(capsys, *argv) -> str:
    """``specdesk ARGV`` in this process: exit 2 and one line on stderr, which it returns."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (rc, err)
    return err


@pytest.mark.parametrize("args, needle", [
    (["--clients", "0"], "clients must be a positive integer"),
    (["--url", "localhost:8080"], "http://HOST:PORT"),
    (["--pid", "5"], "goes with --url"),
    (["--url", "http://127.0.0.1:9", "--", "--k", "3"], "not both"),
    (["--url", "http://127.0.0.1:{port}"], "cannot reach the server"),
    (["--", "--target", "missing.gguf"], "specdesk serve did not start: missing.gguf"),
])
def test_serve_load_bad_input_is_one_line(capsys, args, needle):
    assert needle in one_line_error(capsys, "serve-load", *(a.format(port=free_port()) for a in args))


def test_drift_by_batch_size_with_a_control_that_shows_none(smol_path):
    r = cli("drift", "--target", smol_path, "--threads", 1, "--windows", 1, "--batches", "2,4", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [b["batch"] for b in d["by_batch"]] == [1, 2, 4] and d["positions"] == 16
    control = d["by_batch"][0]
    assert control["tv_max"] == 0.0 and control["flips"] == 0 and control["logit_diff_max"] == 0.0
    assert d["measured_on"]["target"] == smol_path.name and d["measured_on"]["cached"] is False


@pytest.mark.parametrize("args, needle", [
    (["--batches", "1-3"], "a verify batch is 2 to 33 tokens, got 1"),
    (["--batches", "two"], "batches must be LO-HI"),
    (["--windows", "0"], "windows must be an integer from 1 to 6"),
    (["--target", "missing.gguf"], "missing.gguf"),
])
def test_drift_bad_input_is_one_line(capsys, args, needle):
    assert needle in one_line_error(capsys, "drift", *args)
