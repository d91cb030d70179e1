"""``specdesk``: with a subcommand it is the CLI; with none it opens the app.

The one module that sees both front ends: it hands the CLI a launcher for the app,
so the CLI never imports Qt and the app never imports the CLI.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence


class _App:
    """Opens the app (or its self-test) on demand; Qt is imported only then."""

    def launch(self, files: Sequence[Path] = (), target: Path | None = None, draft: Path | None = None,
               new_instance: bool = False) -> int:
        from .ui.startup import launch_gui

        return launch_gui(files=files, target=target, draft=draft, new_instance=new_instance)

    def self_test(self, model: Path | None, draft: Path | None) -> int:
        from .ui.selftest import run_self_test

        return run_self_test(model, draft)


#: The CLI's commands (``specdesk.cli.COMMANDS``; a test keeps the two equal): any other
#: first word, or none, opens the app.
CLI_COMMANDS = ("generate", "compare", "models", "bench", "advise", "doctor", "rpc-server", "serve", "serve-load", "drift")


def opens_app(argv: Sequence[str]) -> bool:
    """Whether ``argv`` opens the app (no command, ``gui``, files, ``--self-test``), read
    before the CLI is imported, which loads llama.cpp; the CLI's parser then decides
    again, exactly."""
    if any(a.startswith("--self-test") for a in argv):
        return True
    words = [a for a in argv if not a.startswith("-")]
    return not words or words[0] not in CLI_COMMANDS


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if opens_app(args):
        # The app's Qt thread shares the CPUs with llama.cpp's: its threads must not spin
        # through the UI's turns. Set before llama.cpp (and its OpenMP runtime) is loaded.
        from .engine.threads import prepare_for_ui

        prepare_for_ui()
    try:
        from .cli import main as cli_main  # a second of imports: Ctrl+C here is no traceback either
    except KeyboardInterrupt:
        print("specdesk: interrupted", file=sys.stderr)
        return 130
    return cli_main(args, app=_App())


if __name__ == "__main__":
    sys.exit(main())
