"""PyInstaller entry point of the SpecDesk bundle: the same as the ``specdesk``
command (no arguments: the app; a subcommand: the CLI).

Until ``--self-test`` is wired into specdesk/cli.py, this script handles
``--self-test [MODEL] [--self-test-draft PATH]`` itself; once the CLI parser knows
the flag, the CLI handles it and this shim does nothing.
"""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path


def _self_test_shim(argv: list[str]) -> int | None:
    if "--self-test" not in argv:
        return None
    from specdesk.cli import build_parser

    if "--self-test" in build_parser()._option_string_actions:  # noqa: SLF001 - the CLI has it now
        return None
    rest = argv[argv.index("--self-test") + 1:]
    model = draft = None
    i = 0
    while i < len(rest):
        if rest[i] == "--self-test-draft" and i + 1 < len(rest):
            draft = Path(rest[i + 1])
            i += 2
        elif not rest[i].startswith("-") and model is None:
            model = Path(rest[i])
            i += 1
        else:
            print(f"specdesk: error: unexpected argument {rest[i]!r} after --self-test", file=sys.stderr)
            return 2
    from specdesk.selftest import run_self_test

    return run_self_test(model, draft)


def main() -> int:
    multiprocessing.freeze_support()
    argv = sys.argv[1:]
    rc = _self_test_shim(argv)
    if rc is not None:
        return rc
    from specdesk.__main__ import main as specdesk_main

    return specdesk_main(argv)


if __name__ == "__main__":
    sys.exit(main())
