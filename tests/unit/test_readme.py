"""The README's two commands are what users and CI run."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from readme_commands import command  # noqa: E402


def test_readme_has_exactly_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert text.count("<!-- cmd:") == 2
    run, test = command("run"), command("test")
    assert "fetch-default" in run and run.rstrip().endswith("specdesk")
    assert "pip install -e '.[test]'" in test and "fetch-default --test-model" in test and "pytest" in test
    # the layering contracts and the linter run before the tests, so a violation fails CI
    assert test.index("lint-imports") < test.index("pytest") and test.index("ruff check") < test.index("pytest")


def test_ci_runs_the_readme_test_command():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "readme_commands.py"), "test"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == command("test")
    assert "readme_commands.py test" in (ROOT / ".ci" / "run").read_text()


def test_both_commands_build_llama_cpp_with_rpc_at_the_pinned_version():
    """Both commands build llama.cpp with its RPC backend, bypassing a wheel pip cached
    earlier without it, at the version pyproject pins (else pip would replace it)."""
    import re

    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(d for d in deps if d.startswith("llama-cpp-python"))
    for which in ("run", "test"):
        cmd = command(which)
        m = re.search(r'CMAKE_ARGS="([^"]*)" \S*pip install --no-cache-dir (\S+)', cmd)
        assert m and "-DGGML_RPC=ON" in m.group(1) and m.group(2) == pin, cmd
        assert cmd.index(pin) < cmd.index("pip install -e")
