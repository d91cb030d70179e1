#!/usr/bin/env python3
"""Render assets/icons/specdesk.svg to the hicolor PNG sizes desktops ask for.

    .venv/bin/python packaging/render_icons.py [--check]

writes assets/icons/hicolor/<n>x<n>/specdesk.png for n in 16, 32, 48, 64, 128, 256,
512, with QtSvg on the offscreen platform (no display needed). The PNGs are
committed; run this again after changing the SVG. ``--check`` only verifies that
every PNG exists with the right size, and exits 1 if not.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SIZES = (16, 32, 48, 64, 128, 256, 512)
ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "assets" / "icons" / "specdesk.svg"
OUT = ROOT / "assets" / "icons" / "hicolor"


def png_path(size: int, out: Path = OUT) -> Path:
    return out / f"{size}x{size}" / "specdesk.png"


def render(svg: Path = SVG, out: Path = OUT, sizes=SIZES) -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 - needed for QPainter
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"cannot read {svg} as SVG")
    written = []
    for n in sizes:
        img = QImage(n, n, QImage.Format.Format_ARGB32)
        img.fill(Qt.GlobalColor.transparent)
        p = QPainter(img)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(p)
        p.end()
        dest = png_path(n, out)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".png.tmp")
        if not img.save(str(tmp), "PNG"):
            raise SystemExit(f"cannot write {dest}")
        os.replace(tmp, dest)
        written.append(dest)
    return written


def check(out: Path = OUT) -> list[str]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QImage

    bad = []
    for n in SIZES:
        f = png_path(n, out)
        img = QImage(str(f))
        if img.isNull() or (img.width(), img.height()) != (n, n):
            bad.append(f"{f}: {'missing or unreadable' if img.isNull() else f'{img.width()}x{img.height()}'}")
    return bad


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = check()
        for b in bad:
            print(f"render_icons: {b}", file=sys.stderr)
        return 1 if bad else 0
    for f in render():
        print(f.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
