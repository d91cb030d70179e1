"""``specdesk models``: the default pair, the library of local GGUF files, pairing."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import SpecDeskError
from ..fmt import format_bytes, format_params
from ..library.defaults import fetch
from ..library.discovery import ScanResult, scan
from ..library.gguf import inspect_gguf, validate_gguf
from .download import add_download_parser, cmd_download
from ..library.pairing import check_pair, drafts_for
from ..session import ModelSpec, devices, supports_gpu_offload
from ..session.preflight import estimate
from .args import Parser, gpu_layers, layers_of, positive_int, warn_gpu_layers
from .output import EXIT_USAGE, dump_json, printable, progress_bar


def add_parsers(sub) -> None:
    m = sub.add_parser("models", help="the default models and local GGUF files")
    msub = m.add_subparsers(dest="models_command", parser_class=Parser, required=True)
    f = msub.add_parser("fetch-default", help="download and verify the default pair into models/")
    f.add_argument("--test-model", action="store_true", help="also fetch the tiny test model (SmolLM2-135M)")
    ls = msub.add_parser("list", help="list the GGUF files on this computer (models/, your folders, HF cache, LM Studio, Ollama)")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--no-cache", action="store_true", help="re-read every file instead of using the scan cache")
    ins = msub.add_parser("inspect", help="read a GGUF's metadata without loading the weights")
    ins.add_argument("file", type=Path)
    ins.add_argument("--json", action="store_true")
    ins.add_argument("--ctx", type=positive_int("context size"), default=4096)
    ins.add_argument("--gpu-layers", type=gpu_layers("GPU layers"), default="auto", metavar="auto|N",
                     help="layers offloaded in the estimate (default auto: as many as the GPU holds, as a load would)")
    add_download_parser(msub)
    cp = msub.add_parser("check-pair", help="can DRAFT speculate for TARGET? exit 0 if so, 2 with the reason if not")
    cp.add_argument("target", type=Path)
    cp.add_argument("draft", type=Path)
    cp.add_argument("--json", action="store_true")
    dr = msub.add_parser("drafts", help="which models in the library can draft for TARGET: same-vocabulary "
                                        "drafts first, then smaller models that draft translated, smallest "
                                        "first; the others with their reason")
    dr.add_argument("target", type=Path)
    dr.add_argument("--json", action="store_true")


def cmd_models(args) -> int:
    commands = {
        "fetch-default": _fetch_default,
        "list": _list,
        "inspect": _inspect,
        "check-pair": _check_pair,
        "drafts": _drafts,
        "download": cmd_download,
    }
    try:
        run = commands[args.models_command]
    except KeyError:
        raise SpecDeskError(f"unknown models command {args.models_command!r}") from None
    return run(args)


def _fetch_default(args) -> int:
    roles = ["target", "draft"] + (["test"] if args.test_model else [])
    bar = progress_bar(total=100, unit="%", bar_format="{desc:<60.60} {percentage:3.0f}%|{bar}|")
    last = [0]

    def progress(msg: str, frac: float) -> None:
        bar.set_description_str(msg, refresh=False)
        n = int(frac * 100)
        if n != last[0]:
            bar.update(n - last[0]) if n > last[0] else bar.reset(total=100)
            last[0] = n

    try:
        paths = fetch(roles, progress)
    finally:
        bar.close()
    for p in paths:
        print(p)
    return 0


def format_table(result: ScanResult) -> str:
    rows = [("NAME", "ROLE", "SOURCES", "QUANT", "PARAMS", "SIZE", "PATH")]
    errors: dict[int, str] = {}
    for e in result.entries:
        info = e.info or {}
        if not e.present:
            quant, params, size = "-", "-", "missing"
        else:
            quant = str(info.get("quant") or "-")
            params = format_params(info.get("parameters"))
            size = format_bytes(e.size) + (f" in {e.parts} parts" if e.parts > 1 else "")
        rows.append((printable(e.name), e.role or "-", ",".join(e.sources), printable(quant), params, size, printable(e.path)))
        if e.error:
            errors[len(rows) - 1] = e.error
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
        if i in errors:
            lines.append(f"    {'missing' if not result.entries[i - 1].present else 'invalid'}: {printable(errors[i])}")
    valid = sum(1 for e in result.entries if e.valid)
    lines.append(f"{len(result.entries)} files, {valid} usable")
    return "\n".join(lines)


def _list(args) -> int:
    """``specdesk models list [--json]``: every GGUF file SpecDesk can find."""
    result = scan(use_cache=not getattr(args, "no_cache", False))
    if getattr(args, "json", False):
        print(dump_json(result.to_dict()))
        return 0
    print(format_table(result))
    for n in result.notes:
        print(f"note: {n}", file=sys.stderr)
    return 0


def _inspect(args) -> int:
    warn_gpu_layers(layers_of(args.gpu_layers))
    info = inspect_gguf(args.file)
    info["memory"] = estimate(ModelSpec(args.file, n_gpu_layers=layers_of(args.gpu_layers), n_ctx=args.ctx))
    info["devices"] = [d.to_dict() for d in devices()]
    info["gpu_offload"] = supports_gpu_offload()
    if args.json:
        print(dump_json(info))
        return 0
    for k, v in info.items():
        if isinstance(v, dict):
            print(f"{k}:")
            for kk, vv in v.items():
                print(f"  {printable(kk)}: {format_bytes(vv) if kk.endswith('_bytes') else printable(vv)}")
        elif k == "devices":
            print("devices:")
            for d in v:
                print(f"  {d['name']} ({d['kind']}): {format_bytes(d['free_bytes'])} free of {format_bytes(d['total_bytes'])}")
        else:
            print(f"{k}: {format_bytes(v) if k == 'file_size' else printable(v)}")
    return 0


def _drafts(args) -> int:
    validate_gguf(args.target)
    lib = scan()
    cands = [(e.path, e.name) for e in lib.entries if e.present and e.error is None]
    with progress_bar(total=len(cands), desc="pairing", leave=False, disable=args.json) as bar:
        res = drafts_for(args.target, cands, progress=lambda m, f: bar.update(int(f * len(cands)) - bar.n))
    if args.json:
        print(dump_json([c.to_dict() for c in res]))
        return 0
    usable = [c for c in res if c.usable]
    print(f"{len(usable)} of {len(res)} models can draft for {args.target.name}" + (":" if res else "."))
    for c in res:
        if c.compatible:
            head = f"  {c.head}" if c.head else ""
            print(f"  ok          {format_bytes(c.size):>10}  {printable(c.name)}  ({printable(c.path)}){head}")
    for c in res:
        if c.translated:
            print(f"  translated  {format_bytes(c.size):>10}  {printable(c.name)}: {c.reason}; a step costs about "
                  f"{c.cost_ratio:.2f} target steps by size  ({printable(c.path)})")
    for c in res:
        if not c.usable:
            print(f"  no          {'':>10}  {printable(c.name)}: {printable(c.reason)}")
    return 0


def _check_pair(args) -> int:
    res = check_pair(args.target, args.draft)
    if args.json:
        print(dump_json({"compatible": res.ok, "rule": res.rule or None, "reason": res.reason or None,
                         "common_vocab": res.n_common, "token_id": res.token_id}))
    if res.ok:
        if not args.json:
            print(f"compatible: {args.draft.name} can draft for {args.target.name} (common vocabulary {res.n_common} tokens)")
        return 0
    if not args.json:
        print(f"specdesk: error: {args.draft.name} cannot draft for {args.target.name}: {res.reason}", file=sys.stderr)
    return EXIT_USAGE
