"""``specdesk`` command line. Never imports Qt.

Every user error prints one line on stderr and exits with code 2. The app itself is
opened by the entry point (``specdesk.__main__``), which hands the CLI a launcher for
the commands that open a window (no command, ``gui``, ``--self-test``).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Callable, Protocol, Sequence

from .. import __version__
from ..errors import SpecDeskError
from ..session import ctrl_c_guard
from . import bench, doctor, drift, generate, models, rpc, serve, serve_load
from .args import Parser, add_generation_options, add_model_options
from .output import EXIT_USAGE, error


class AppLauncher(Protocol):
    """What the entry point provides to open the app (the CLI never imports Qt)."""

    def launch(self, files: Sequence[Path] = (), target: Path | None = None, draft: Path | None = None,
               new_instance: bool = False) -> int: ...

    def self_test(self, model: Path | None, draft: Path | None) -> int: ...


def build_parser() -> Parser:
    p = Parser(prog="specdesk", description="Speculative decoding on local GGUF models. With no command, opens the app.")
    p.add_argument("--version", action="version", version=f"specdesk {__version__}")
    p.add_argument("--verbose", "-v", action="store_true", help="show llama.cpp's log")
    p.add_argument("--self-test", nargs="?", const="", default=None, metavar="MODEL",
                   help="start the app offscreen, load MODEL as target and draft (default: the SmolLM2 test model, "
                        "else the default pair), generate 8 tokens and check what the window shows; exit 0 if all checks pass")
    p.add_argument("--self-test-draft", type=Path, metavar="PATH", help="the draft model for --self-test (default: MODEL itself)")
    sub = p.add_subparsers(dest="command", parser_class=Parser)

    g = sub.add_parser("generate", help="generate from a prompt, with speculation")
    add_model_options(g)
    add_generation_options(g)

    c = sub.add_parser("compare", help="target alone vs speculative on the same prompt, interleaved repeats")
    add_model_options(c)
    add_generation_options(c)
    generate.add_compare_options(c)

    models.add_parsers(sub)
    bench.add_parsers(sub)
    doctor.add_parser(sub)
    drift.add_parser(sub)
    rpc.add_parser(sub)
    serve.add_parser(sub)
    serve_load.add_parser(sub)
    gui = sub.add_parser("gui", help="open the app (the same as no command); `specdesk FILE...` is `specdesk gui FILE...`")
    add_app_options(gui)
    return p


def add_app_options(p: Parser) -> None:
    """The app's own arguments: the GGUF files to open, and whether to join the running app."""
    p.add_argument("files", nargs="*", type=Path, metavar="FILE",
                   help="GGUF files to open: one is the target (or the app asks, when a target is loaded and it can "
                        "draft for it); of two, the larger is the target. A split model is named by any of its parts")
    p.add_argument("--target", type=Path, metavar="PATH", help="the target model to open")
    p.add_argument("--draft", type=Path, metavar="PATH", help="the draft model to open")
    p.add_argument("--new-instance", action="store_true",
                   help="open another window beside the running app, with its own data folder, instead of handing the "
                        "files to the app already running")


_APP_OPTIONS = ("--target", "--draft", "--new-instance")


def route_app_files(argv: list[str], commands: Sequence[str]) -> list[str]:
    """``specdesk FILE...`` and ``specdesk --target PATH ...`` mean ``specdesk gui ...``:
    the first argument after -v that is not a command but a path (an existing one, or a
    name ending in .gguf), or one of the app's own options, starts the app's arguments."""
    i = 0
    while i < len(argv) and argv[i] in ("-v", "--verbose"):
        i += 1
    if i == len(argv):
        return argv
    tok = argv[i]
    if tok.split("=", 1)[0] in _APP_OPTIONS or (
            not tok.startswith("-") and tok not in commands and (tok.lower().endswith(".gguf") or os.path.exists(tok))):
        return argv[:i] + ["gui"] + argv[i:]
    return argv


COMMANDS: dict[str, Callable[..., int]] = {
    "generate": generate.cmd_generate,
    "compare": generate.cmd_compare,
    "models": models.cmd_models,
    "bench": bench.cmd_bench,
    "advise": bench.cmd_advise,
    "doctor": doctor.cmd_doctor,
    "rpc-server": rpc.cmd_rpc_server,
    "serve": serve.cmd_serve,
    "serve-load": serve_load.cmd_serve_load,
    "drift": drift.cmd_drift,
}


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("llama.cpp").setLevel(logging.INFO if verbose else logging.CRITICAL)


def main(argv: Sequence[str] | None = None, app: AppLauncher | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(route_app_files(argv, [*COMMANDS, "gui"]))
    _setup_logging(args.verbose)
    if args.self_test is not None or args.command in (None, "gui"):
        if app is None:
            return error("this command opens the app: run `specdesk` (the app's entry point) instead of `specdesk-cli`")
        if args.self_test is not None:
            return app.self_test(Path(args.self_test) if args.self_test else None, args.self_test_draft)
        if args.command == "gui":
            return app.launch(args.files, args.target, args.draft, args.new_instance)
        return app.launch()
    try:
        with ctrl_c_guard():  # Ctrl+C inside a llama.cpp callback is kept and raised, never dropped
            return COMMANDS[args.command](args)
    except SpecDeskError as e:
        return error(str(e))
    except KeyboardInterrupt:
        print("specdesk: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. piped into head): not an error worth a traceback.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


__all__ = ["AppLauncher", "EXIT_USAGE", "build_parser", "main"]
