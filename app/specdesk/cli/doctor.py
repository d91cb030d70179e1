"""``specdesk doctor``: what this machine and this install give SpecDesk to work with."""

from __future__ import annotations

import platform
import sys

import psutil

from .. import __version__
from ..fmt import format_bytes
from ..library.defaults import default_models, is_present
from ..library.discovery import scan
from ..paths import models_dir, user_cache_dir, user_data_dir
from ..errors import SpecDeskError
from ..session import ModelSpec, backends, build_info, devices, gpu_build_hint, supports_gpu_offload
from ..session.offload import MARGIN_BYTES, fit_offload, offload_gpus
from ..session.source_table import alone_text, file_rows
from ..session.text import role_text
from ..session.remote import register_servers, reinstall_command, rpc_supported
from .args import rpc_endpoints, use_rpc
from .output import dump_json


def add_parser(sub) -> None:
    d = sub.add_parser("doctor", help="the llama.cpp build, devices and memory, models and folders: what SpecDesk can use here")
    d.add_argument("--json", action="store_true")
    d.add_argument("--no-scan", action="store_true", help="skip the library scan (models found)")
    d.add_argument("--rpc", type=rpc_endpoints, default=(), metavar="HOST:PORT[,HOST:PORT...]",
                   help="also list the devices of these RPC servers, with their memory")


def offload_effect(devs: list, offload: bool) -> tuple[str, str | None]:
    """What GPU layers do on this build, and where the default pair would go by default
    (at the default context; None without a GPU or without the pair's files)."""
    if not offload:
        return "none: this llama.cpp has no GPU backend, so --gpu-layers and the app's GPU layers are ignored", None
    if not offload_gpus(devs):
        return "no GPU device was found, so models run on the CPU", None
    effect = (f"by default as many layers as the GPU's free memory holds, less {format_bytes(MARGIN_BYTES)} per device, "
              "the target first (--gpu-layers N and the app's settings choose)")
    pair = default_models(["target", "draft"])
    if not all(m.path.is_file() for m in pair):
        return effect, None
    try:
        off = fit_offload(ModelSpec(pair[0].path), ModelSpec(pair[1].path), devs, offload)
    except SpecDeskError:  # a damaged default file: the pair's own line says so
        return effect, None
    return effect, off.describe()


def report(scan_library: bool = True) -> dict:
    info = build_info()
    offload = supports_gpu_offload()
    devs = devices()
    effect, default_pair = offload_effect(devs, offload)
    vm = psutil.virtual_memory()
    out: dict = {
        "specdesk": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "llama_cpp": {
            "llama_cpp_python": info["llama_cpp_python"],
            "library": info["library"],
            "backends": backends(),
            "cpu_features": [f.split("=")[0].split(":")[-1].strip() for f in info["system_info"].split("|")
                             if f.strip().endswith("= 1")],
            "system_info": info["system_info"],
            "extra_buffers_off": info["extra_buffers_off"],
        },
        "devices": [d.to_dict() for d in devs],
        "gpu_offload": {
            "supported": offload,
            "gpu_layers_effect": effect,
            "default_pair": default_pair,
            "fix": None if offload else gpu_build_hint(),
        },
        "rpc": {"supported": rpc_supported(), "fix": None if rpc_supported() else reinstall_command()},
        "ram": {"total_bytes": vm.total, "available_bytes": vm.available},
        "folders": {"models": str(models_dir()), "data": str(user_data_dir()), "cache": str(user_cache_dir())},
        "default_pair": [
            {"role": m.role, "file": m.file, "path": str(m.path), "present": m.path.is_file(),
             "verified": is_present(m)} for m in default_models(["target", "draft"])
        ],
    }
    if scan_library:
        lib = scan()
        out["models"] = [{"name": e.name, "path": str(e.path), "size_bytes": e.size, "usable": e.valid,
                          "sources": list(e.sources), "error": e.error, **_drafts(e.info), **_roles(e.info, e.error)}
                         for e in lib.entries if e.present]
    return out


def _drafts(info: dict | None) -> dict:
    """What a model's own file offers to draft with (its MTP heads), and whether it can
    draft for itself with no draft file."""
    info = info or {}
    return {"draft_sources": dict(file_rows(info)), "drafts_alone": alone_text(info)}


def _roles(info: dict | None, error: str | None) -> dict:
    """Whether a model can be a target and a draft, and how it rolls back or why not."""
    return {"as_target": role_text(info, error, "target"), "as_draft": role_text(info, error, "draft"),
            "rollback": (info or {}).get("rollback")}


def _model_line(m: dict) -> str:
    """One model's roles on one line: a target, a draft, its own draft sources."""
    own = "; ".join(f"{k}: {v}" for k, v in m.get("draft_sources", {}).items())
    if not m["usable"]:
        return f"  {m['name']}: unusable: {m['error']}"
    return f"  {m['name']}: as a target {m['as_target']}; as a draft {m['as_draft']}" + (f"; {own}" if own else "")


def _text(r: dict) -> str:
    lc = r["llama_cpp"]
    lines = [
        f"specdesk {r['specdesk']} on Python {r['python']}, {r['platform']}",
        f"llama.cpp: llama-cpp-python {lc['llama_cpp_python']}, backends {', '.join(lc['backends'])}",
        f"  CPU features: {' '.join(lc['cpu_features']) or '-'}",
    ]
    if lc.get("extra_buffers_off"):
        lines.append(f"  AMX: {lc['extra_buffers_off']}")
    lines.append("devices:")
    for d in r["devices"]:
        if d.get("error"):
            lines.append(f"  {d['name']:<12} remote      unreachable: {d['error']}")
            continue
        kind = "remote" if d.get("is_remote") else d["kind"]
        lines.append(f"  {d['name']:<12} {kind:<11} {format_bytes(d['free_bytes'])} free of "
                     f"{format_bytes(d['total_bytes'])}  ({'RPC server ' if d.get('is_remote') else ''}{d['description']})")
    g = r["gpu_offload"]
    lines.append(f"GPU offload: {'yes' if g['supported'] else 'no'}: {g['gpu_layers_effect']}")
    if g.get("default_pair"):
        lines.append(f"  the default pair, by default: {g['default_pair']}")
    if g["fix"]:
        lines.append(f"  to offload: {g['fix']}")
    rpc = r.get("rpc") or {}
    lines.append("RPC backend: " + ("yes (`specdesk rpc-server` serves this machine; --rpc uses others)" if rpc.get("supported")
                                    else f"no: reinstall with {rpc.get('fix')}"))
    lines.append(f"RAM: {format_bytes(r['ram']['available_bytes'])} free of {format_bytes(r['ram']['total_bytes'])}")
    for m in r["default_pair"]:
        state = "verified" if m["verified"] else ("present, not verified" if m["present"] else "missing: specdesk models fetch-default")
        lines.append(f"default {m['role']}: {m['file']}: {state}")
    if "models" in r:
        usable = sum(1 for m in r["models"] if m["usable"])
        lines.append(f"models found: {len(r['models'])} ({usable} usable; specdesk models list shows them)")
        alone = [m for m in r["models"] if m.get("drafts_alone")]
        lines.append(f"models that draft for themselves, with no draft file: {len(alone) or 'none'}")
        lines += [f"  {m['name']}: {m['drafts_alone']}" for m in alone]
        lines.append("what each model can be (a target, a draft, its own draft sources):")
        lines += [_model_line(m) for m in r["models"]]
    for k, v in r["folders"].items():
        lines.append(f"{k} folder: {v}")
    return "\n".join(lines)


def cmd_doctor(args) -> int:
    if getattr(args, "rpc", ()):
        use_rpc(args.rpc)
        register_servers(args.rpc)
    r = report(scan_library=not args.no_scan)
    print(dump_json(r) if args.json else _text(r))
    return 0
