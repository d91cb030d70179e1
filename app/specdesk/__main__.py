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


def main(argv: list[str] | None = None) -> int:
    try:
        from .cli import main as cli_main  # a second of imports: Ctrl+C here is no traceback either
    except KeyboardInterrupt:
        print("specdesk: interrupted", file=sys.stderr)
        return 130
    return cli_main(sys.argv[1:] if argv is None else argv, app=_App())


if __name__ == "__main__":
    sys.exit(main())
