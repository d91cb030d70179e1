"""Desktop integration: the .desktop entry, the AppStream metainfo, the rendered
icons, and packaging/install-desktop (install into a temporary XDG_DATA_HOME, then
--uninstall), both from the checkout and from the copy inside a bundle."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import specdesk

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "packaging"
DESKTOP = PKG / "specdesk.desktop"
METAINFO = PKG / "io.github.specdesk.SpecDesk.metainfo.xml"
INSTALL = PKG / "install-desktop"
SIZES = (16, 32, 48, 64, 128, 256, 512)


def read_desktop(path: Path) -> dict[str, str]:
    cp = configparser.ConfigParser(interpolation=None, strict=True)
    cp.optionxform = str  # keys are case-sensitive
    cp.read_string(path.read_text(encoding="utf-8"))
    assert cp.sections() == ["Desktop Entry"]
    return dict(cp["Desktop Entry"])


def test_desktop_entry_has_the_required_keys():
    d = read_desktop(DESKTOP)
    assert d["Type"] == "Application"
    assert d["Name"] == "SpecDesk"
    assert d["Icon"] == "specdesk"
    assert d["Terminal"] == "false"
    assert d["Exec"].split()[0] == "specdesk"
    cats = d["Categories"]
    assert cats.endswith(";") and {"Development", "Utility"} <= set(cats.split(";"))
    assert d["StartupWMClass"] == "SpecDesk"
    assert "%" not in d["Exec"]  # the app takes no file arguments


def test_desktop_entry_validates():
    if not shutil.which("desktop-file-validate"):
        pytest.skip("desktop-file-validate is not installed")
    r = subprocess.run(["desktop-file-validate", str(DESKTOP)], capture_output=True, text=True)
    assert r.returncode == 0 and "error" not in r.stdout.lower(), r.stdout + r.stderr


def test_metainfo_has_the_required_elements():
    root = ET.parse(METAINFO).getroot()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    assert root.findtext("id") == "io.github.specdesk.SpecDesk"
    assert root.findtext("name") == "SpecDesk"
    assert root.findtext("summary")
    assert root.findtext("metadata_license") and root.findtext("project_license") == "MIT"
    assert root.find("description/p") is not None
    launch = root.find("launchable")
    assert launch.get("type") == "desktop-id" and launch.text == DESKTOP.name
    images = [i.text for i in root.findall("screenshots/screenshot/image")]
    assert images and all("/assets/screenshots/" in i and i.endswith(".png") for i in images)
    assert len([s for s in root.findall("screenshots/screenshot") if s.get("type") == "default"]) == 1
    assert root.find("content_rating").get("type", "").startswith("oars-")
    versions = [r.get("version") for r in root.findall("releases/release")]
    assert specdesk.__version__ in versions
    assert all(r.get("date") for r in root.findall("releases/release"))


def test_metainfo_validates():
    if not shutil.which("appstreamcli"):
        pytest.skip("appstreamcli is not installed")
    r = subprocess.run(["appstreamcli", "validate", "--no-net", str(METAINFO)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_icons_exist_at_every_size():
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QImage

    for n in SIZES:
        f = ROOT / "assets" / "icons" / "hicolor" / f"{n}x{n}" / "specdesk.png"
        img = QImage(str(f))
        assert not img.isNull(), f
        assert (img.width(), img.height()) == (n, n), f
        assert img.hasAlphaChannel()
        # drawn, with transparent corners (the rounded square)
        assert img.pixelColor(n // 2, n // 2).alpha() == 255
        assert img.pixelColor(0, 0).alpha() == 0


def fake_bundle(where: Path) -> Path:
    (where / "_internal").mkdir(parents=True)
    exe = where / "SpecDesk"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return where


def installed(data: Path) -> list[Path]:
    files = [data / "applications" / "specdesk.desktop", data / "icons/hicolor/scalable/apps/specdesk.svg",
             data / "metainfo" / "io.github.specdesk.SpecDesk.metainfo.xml"]
    files += [data / f"icons/hicolor/{n}x{n}/apps/specdesk.png" for n in SIZES]
    return files


def run(cmd, data: Path, **kw):
    env = dict(os.environ, XDG_DATA_HOME=str(data))
    return subprocess.run(["bash", *map(str, cmd)], env=env, capture_output=True, text=True, timeout=60, **kw)


def test_install_and_uninstall(tmp_path):
    bundle = fake_bundle(tmp_path / "My Apps" / "SpecDesk")  # a space in the path
    data = tmp_path / "xdg-data"
    r = run([INSTALL, bundle], data, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for f in installed(data):
        assert f.is_file(), f
    d = read_desktop(data / "applications" / "specdesk.desktop")
    exe = bundle.resolve() / "SpecDesk"
    assert d["Exec"] == f'"{exe}"'
    assert d["TryExec"] == str(exe)
    assert d["Icon"] == "specdesk" and d["Name"] == "SpecDesk"
    if shutil.which("desktop-file-validate"):
        v = subprocess.run(["desktop-file-validate", str(data / "applications" / "specdesk.desktop")], capture_output=True, text=True)
        assert v.returncode == 0, v.stdout
    for n in (16, 512):
        assert (data / f"icons/hicolor/{n}x{n}/apps/specdesk.png").read_bytes() == \
            (ROOT / f"assets/icons/hicolor/{n}x{n}/specdesk.png").read_bytes()
    # again: idempotent
    assert run([INSTALL, bundle], data).returncode == 0
    r = run([INSTALL, "--uninstall"], data)
    assert r.returncode == 0, r.stderr
    assert not [f for f in installed(data) if f.exists()]
    # a second uninstall is fine too
    assert run([INSTALL, "--uninstall"], data).returncode == 0


def test_install_from_inside_a_bundle(tmp_path):
    """The copy packaging/build puts in <bundle>/_internal/packaging, with no arguments."""
    bundle = fake_bundle(tmp_path / "SpecDesk")
    inner = bundle / "_internal"
    shutil.copytree(PKG, inner / "packaging", ignore=shutil.ignore_patterns("*.spec", "__pycache__", "build"))
    shutil.copytree(ROOT / "assets" / "icons", inner / "assets" / "icons")
    data = tmp_path / "data"
    r = run([inner / "packaging" / "install-desktop"], data, cwd="/")
    assert r.returncode == 0, r.stderr
    d = read_desktop(data / "applications" / "specdesk.desktop")
    assert d["Exec"] == str(bundle.resolve() / "SpecDesk")
    assert all(f.is_file() for f in installed(data))


def test_install_without_a_bundle_fails_clearly(tmp_path):
    r = run([INSTALL, tmp_path / "nowhere"], tmp_path / "data")
    assert r.returncode != 0
    assert "no bundle at" in r.stderr and "packaging/build" in r.stderr
    assert not (tmp_path / "data" / "applications").exists()
    notexe = tmp_path / "b"
    (notexe / "SpecDesk").mkdir(parents=True)
    r = run([INSTALL, notexe], tmp_path / "data")
    assert r.returncode != 0 and "not an executable" in r.stderr


def test_render_icons_check_passes():
    import sys

    r = subprocess.run([sys.executable, str(PKG / "render_icons.py"), "--check"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
    assert r.returncode == 0, r.stderr
