"""``specdesk models download REPO [--file NAME | --quant Q] [--revision R] [--list]``.

Downloads a GGUF model from the Hugging Face Hub into the Hugging Face cache (see
``specdesk.library.hub``) with a progress bar on stderr and prints the path of the
model (the first part of a split model) on stdout. ``--list`` prints the repo's GGUF
models instead. ``REPO:QUANT`` is short for ``REPO --quant QUANT``. Errors are raised
as ``SpecDeskError``; the CLI prints them as one line and exits with code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import SpecDeskError
from ..fmt import format_download_size
from ..library import hub
from .output import progress_bar

__all__ = ["add_download_parser", "cmd_download"]


def add_download_parser(models_subparsers) -> argparse.ArgumentParser:
    """Add ``download`` to the ``specdesk models`` subparsers; returns the new parser."""
    d = models_subparsers.add_parser(
        "download",
        help="download a GGUF model from the Hugging Face Hub into its cache",
        description="Download a GGUF model from the Hugging Face Hub (HF_ENDPOINT) into the Hugging Face cache "
                    "(HF_HUB_CACHE) and print its path. An interrupted download resumes when run again. "
                    "Gated or private repos need a token in HF_TOKEN (or `hf auth login`).",
    )
    d.add_argument("repo", metavar="REPO", help="the repo id, e.g. bartowski/SmolLM2-135M-Instruct-GGUF "
                                                "(REPO:QUANT picks a quantization)")
    which = d.add_mutually_exclusive_group()
    which.add_argument("--file", metavar="NAME", help="the GGUF file in the repo (any part of a split model)")
    which.add_argument("--quant", metavar="Q", help="the quantization type in the file name, e.g. Q4_K_M")
    d.add_argument("--revision", metavar="R", default=None, help="branch, tag or commit (default: main)")
    d.add_argument("--list", action="store_true", help="list the repo's GGUF models and exit")
    d.add_argument("--cache-dir", metavar="DIR", type=Path, default=None,
                   help="the Hugging Face cache to download into (default: HF_HUB_CACHE or ~/.cache/huggingface/hub)")
    return d


def cmd_download(args) -> int:
    repo = args.repo.strip()
    quant = getattr(args, "quant", None)
    filename = getattr(args, "file", None)
    if ":" in repo:
        repo, _, suffix = repo.partition(":")
        if quant is not None or filename is not None:
            raise SpecDeskError(f"give the quantization either as {args.repo!r} or with --quant/--file, not both")
        quant = suffix or None
    if not repo:
        raise SpecDeskError("the repo id is empty")
    revision = getattr(args, "revision", None)
    cache_dir = getattr(args, "cache_dir", None)

    models = hub.list_gguf(repo, revision=revision)
    if getattr(args, "list", False):
        if not models:
            raise SpecDeskError(f"{repo} has no GGUF files")
        rows = [(m.quant or "?", format_download_size(m.total_size), str(len(m.files)), m.primary.filename)
                for m in models]
        header = ("QUANT", "SIZE", "PARTS", "FILE")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
        for r in [header, *rows]:
            print(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}")
        return 0

    model = hub.pick(models, filename=filename, quant=quant)
    bar = progress_bar(total=model.total_size or 0, unit="B", unit_scale=True, unit_divisor=1024,
                       desc=model.name.rsplit("/", 1)[-1][:40], dynamic_ncols=True)

    def progress(done: int, total: int) -> None:
        if total and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    try:
        path = hub.download(repo, model, revision=revision, progress=progress, cache_dir=cache_dir)
    finally:
        bar.close()
    print(path)
    return 0
