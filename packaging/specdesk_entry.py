"""PyInstaller entry point of the SpecDesk bundle: the same as the ``specdesk``
command (no arguments: the app; a subcommand: the CLI; ``--self-test``)."""

from __future__ import annotations

import multiprocessing
import sys


def main() -> int:
    multiprocessing.freeze_support()
    from specdesk.__main__ import main as specdesk_main

    return specdesk_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
