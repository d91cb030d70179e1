"""How SpecDesk writes numbers for people: sizes, parameter counts, rates."""

from __future__ import annotations


def format_bytes(n: int | float | None, missing: str = "n/a") -> str:
    """Memory and file sizes in binary units: 1.50 GiB, 340 MiB, 12 KiB, 512 B."""
    if n is None:
        return missing
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= 2**30:
        return f"{sign}{n / 2**30:.2f} GiB"
    if n >= 2**20:
        return f"{sign}{n / 2**20:.0f} MiB"
    if n >= 2**10:
        return f"{sign}{n / 2**10:.0f} KiB"
    return f"{sign}{int(n)} B"


def format_download_size(n: int | None) -> str:
    """Download sizes in decimal units, as the Hugging Face Hub and browsers show them."""
    if n is None:
        return "? bytes"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def format_params(n: object) -> str:
    """A parameter count: 1.5B, 135M; '-' when unknown."""
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return "-"
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            v = n / div
            return f"{v:.1f}{suffix}" if v < 100 else f"{v:.0f}{suffix}"
    return str(n)


def format_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def format_num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)
