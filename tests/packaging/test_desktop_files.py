"""Desktop integration: the .desktop entry, the AppStream metainfo, the GGUF MIME type,
the rendered icons, and packaging/install-desktop (install into a temporary
XDG_DATA_HOME, then --uninstall), both from the checkout and from the copy inside a
bundle. The MIME type is checked as the desktop reads it: xdg-mime and Qt's
QMimeDatabase on the installed database (each skipped, with the reason, where missing)."""

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
MIME_XML = PKG / "specdesk-gguf.xml"
GGUF_TYPE = "application/x-gguf"
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
    assert d["Exec"] == "specdesk %F"  # the files a file manager opens with it
    assert d["MimeType"] == f"{GGUF_TYPE};"
    cats = d["Categories"]
    assert cats.endswith(";") and {"Development", "Utility"} <= set(cats.split(";"))
    assert d["StartupWMClass"] == "SpecDesk"


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
             data / "metainfo" / "io.github.specdesk.SpecDesk.metainfo.xml", data / "mime/packages/specdesk-gguf.xml"]
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
    assert d["Exec"] == f'"{exe}" %F'
    assert d["MimeType"] == f"{GGUF_TYPE};"
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
    assert tree(data) == {}, "the caches and folders it made are gone too"
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
    assert d["Exec"] == f'{bundle.resolve() / "SpecDesk"} %F'
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


# -- the GGUF file type: "Open with SpecDesk"


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``root``."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def desktop_env(data: Path, home: Path) -> dict[str, str]:
    """The user's desktop as xdg-mime and Qt see it, with a temporary home and data folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "KDE", "GNOME"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(data), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_DIRS="/usr/local/share:/usr/share", QT_QPA_PLATFORM="offscreen")
    return env


def sample_files(where: Path) -> dict[str, Path]:
    where.mkdir(parents=True, exist_ok=True)
    named = where / "model.gguf"
    named.write_bytes(b"\0" * 16)  # by its name alone
    magic = where / "model.bin"
    magic.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\0" * 24)  # by its first bytes alone
    text = where / "notes.txt"
    text.write_text("not a model\n")
    return {"named": named, "magic": magic, "text": text}


QT_TYPES = ("import sys\nfrom PySide6.QtCore import QMimeDatabase\ndb = QMimeDatabase()\n"
            "print(' '.join(db.mimeTypeForFile(p).name() for p in sys.argv[1:]))\n")


def qt_types(env, files) -> list[str]:
    """What Qt's QMimeDatabase (KDE's file managers use it) says the files are."""
    import sys

    r = subprocess.run([sys.executable, "-c", QT_TYPES, *map(str, files)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def xdg_mime(env, *args) -> str:
    r = subprocess.run(["xdg-mime", *args], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 4) or not r.stderr, r.stderr  # 4: nothing found (a default that is not set)
    return r.stdout.strip()


def need_mime_tools() -> None:
    if not shutil.which("update-mime-database"):
        pytest.skip("update-mime-database (shared-mime-info) is not installed: the MIME database cannot be built")


def xdg_mime_reads_the_database() -> str | None:
    """Why xdg-mime cannot be asked here, or None. Outside a known desktop it asks the
    `mimetype` tool (File::MimeInfo), which reads the shared-mime-info database; without
    it, `file`, which does not."""
    if not shutil.which("xdg-mime"):
        return "xdg-mime (xdg-utils) is not installed"
    if not shutil.which("mimetype"):
        return "xdg-mime would ask `file`, which ignores the MIME database: install libfile-mimeinfo-perl"
    return None


def test_the_gguf_type_builds_into_a_mime_database(tmp_path):
    """The XML as shipped: update-mime-database takes it without a complaint, and the
    type it defines names a GGUF file by its name and by its magic, and nothing else."""
    need_mime_tools()
    mime = tmp_path / "data" / "mime"
    (mime / "packages").mkdir(parents=True)
    shutil.copy(MIME_XML, mime / "packages" / MIME_XML.name)
    r = subprocess.run(["update-mime-database", "-V", str(mime)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "error" not in (r.stdout + r.stderr).lower(), r.stdout + r.stderr
    assert "warning" not in (r.stdout + r.stderr).lower(), r.stdout + r.stderr
    root = ET.parse(mime / "application" / "x-gguf.xml").getroot()  # what it derived from ours
    assert root.get("type") == GGUF_TYPE
    env = desktop_env(tmp_path / "data", tmp_path / "home")
    f = sample_files(tmp_path / "files")
    assert qt_types(env, [f["named"], f["magic"], f["text"]]) == [GGUF_TYPE, GGUF_TYPE, "text/plain"]
    why = xdg_mime_reads_the_database()
    if why:
        pytest.skip(f"Qt's QMimeDatabase checked; xdg-mime not: {why}")
    assert [xdg_mime(env, "query", "filetype", str(f[k])) for k in ("named", "magic", "text")] == \
        [GGUF_TYPE, GGUF_TYPE, "text/plain"]


def test_open_with_specdesk_after_install_and_not_after_uninstall(tmp_path):
    need_mime_tools()
    if not shutil.which("update-desktop-database"):
        pytest.skip("update-desktop-database (desktop-file-utils) is not installed: no 'Open with' cache is built")
    bundle = fake_bundle(tmp_path / "SpecDesk")
    data, home = tmp_path / "data", tmp_path / "home"
    env = desktop_env(data, home)
    f = sample_files(tmp_path / "files")
    assert run([INSTALL, bundle], data).returncode == 0
    cache = (data / "applications" / "mimeinfo.cache").read_text()
    assert f"{GGUF_TYPE}=specdesk.desktop;" in cache  # what file managers read for "Open with"
    assert qt_types(env, [f["named"], f["magic"]]) == [GGUF_TYPE, GGUF_TYPE]
    why = xdg_mime_reads_the_database()
    if why is None:
        assert xdg_mime(env, "query", "filetype", str(f["magic"])) == GGUF_TYPE
        assert xdg_mime(env, "query", "default", GGUF_TYPE) == "specdesk.desktop"
    if shutil.which("desktop-file-validate"):
        v = subprocess.run(["desktop-file-validate", str(data / "applications" / "specdesk.desktop")],
                           capture_output=True, text=True)
        assert v.returncode == 0 and "error" not in v.stdout.lower(), v.stdout
    assert run([INSTALL, "--uninstall"], data).returncode == 0
    assert tree(data) == {}
    assert qt_types(env, [f["named"], f["magic"]]) != [GGUF_TYPE, GGUF_TYPE]
    if why is None:
        assert xdg_mime(env, "query", "default", GGUF_TYPE) == ""
    else:
        pytest.skip(f"QMimeDatabase and the caches checked; xdg-mime not: {why}")


def test_uninstall_leaves_the_users_other_types_and_apps_as_they_were(tmp_path):
    need_mime_tools()
    if not shutil.which("update-desktop-database"):
        pytest.skip("update-desktop-database (desktop-file-utils) is not installed")
    data = tmp_path / "data"
    (data / "applications").mkdir(parents=True)
    (data / "applications" / "other.desktop").write_text(
        "[Desktop Entry]\nType=Application\nName=Other\nExec=other %f\nMimeType=text/x-other;\n")
    (data / "mime" / "packages").mkdir(parents=True)
    (data / "mime" / "packages" / "other-type.xml").write_text(
        '<?xml version="1.0"?>\n<mime-info xmlns="http://www.freedesktop.org/standards/shared-mime-info">\n'
        '  <mime-type type="text/x-other"><comment>Other</comment><glob pattern="*.other"/></mime-type>\n</mime-info>\n')
    (data / "icons" / "hicolor" / "48x48" / "apps").mkdir(parents=True)
    (data / "icons" / "hicolor" / "48x48" / "apps" / "other.png").write_bytes(b"\x89PNG")
    subprocess.run(["update-desktop-database", str(data / "applications")], check=True, timeout=60)
    subprocess.run(["update-mime-database", str(data / "mime")], check=True, timeout=120)
    before = tree(data)
    assert run([INSTALL, fake_bundle(tmp_path / "SpecDesk")], data).returncode == 0
    assert GGUF_TYPE in (data / "applications" / "mimeinfo.cache").read_text()
    assert run([INSTALL, "--uninstall"], data).returncode == 0
    after = tree(data)
    assert sorted(after) == sorted(before)
    assert after["applications/mimeinfo.cache"] == before["applications/mimeinfo.cache"]
    assert GGUF_TYPE.encode() not in after["mime/mime.cache"] and b"text/x-other" in after["mime/mime.cache"]


def test_the_macos_bundle_declares_gguf_as_a_document_it_opens():
    """The Info.plist the spec gives PyInstaller's BUNDLE (built on macOS only): a valid
    property list that declares the GGUF type and SpecDesk as a viewer of it."""
    import importlib.util
    import plistlib

    spec = importlib.util.spec_from_file_location("info_plist", PKG / "info_plist.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    plist = plistlib.loads(plistlib.dumps(mod.info_plist("SpecDesk", specdesk.__version__)))
    [doc] = plist["CFBundleDocumentTypes"]
    assert doc["CFBundleTypeRole"] == "Viewer" and doc["LSItemContentTypes"] == [mod.GGUF_UTI]
    [uti] = plist["UTImportedTypeDeclarations"]
    assert uti["UTTypeIdentifier"] == mod.GGUF_UTI and "public.data" in uti["UTTypeConformsTo"]
    tags = uti["UTTypeTagSpecification"]
    assert tags["public.filename-extension"] == ["gguf"] and tags["public.mime-type"] == [GGUF_TYPE]
    root = ET.parse(MIME_XML).getroot()  # the same type as the Linux desktop's
    ns = "{http://www.freedesktop.org/standards/shared-mime-info}"
    assert root.find(f"{ns}mime-type").get("type") == GGUF_TYPE
    assert plist["CFBundleShortVersionString"] == specdesk.__version__
    assert "info_plist=info_plist(NAME, __version__)" in (PKG / "specdesk.spec").read_text()
