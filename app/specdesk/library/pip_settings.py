"""Where pip would look for packages: the index URLs, TLS and proxy settings from
the same places pip reads them (``PIP_*`` environment variables, then pip's config
files: ``PIP_CONFIG_FILE``, the global, user and site ``pip.conf``), in pip's order
of precedence, with ``SPECDESK_PYPI_URL`` above them all."""

from __future__ import annotations

import configparser
import locale
import os
import sys
import urllib.parse
from dataclasses import dataclass

from ..errors import FetchError

DEFAULT_INDEX = "https://pypi.org/simple"
ENV_OVERRIDE = "SPECDESK_PYPI_URL"
_TIMEOUT = 60.0
# command sections of pip.conf read after [global] (later wins): pip download reads
# [download]; users who configure pip for installing often write [install]
_SECTIONS = ("global", "install", "download")


@dataclass(frozen=True)
class Index:
    """One package index and the setting it came from (for messages)."""

    url: str  # as configured, credentials included
    setting: str  # e.g. "PIP_INDEX_URL", "extra-index-url in /etc/pip.conf", "pip's default"

    @property
    def shown(self) -> str:
        """The URL without its password."""
        return redact(self.url)


@dataclass(frozen=True)
class PipSettings:
    indexes: tuple[Index, ...]
    config_files: tuple[str, ...] = ()  # the files read, in pip's order (later wins)
    index_files: tuple[str, ...] = ()  # those that set an index option
    cert: tuple[str, str] | None = None  # (path, setting)
    client_cert: tuple[str, str] | None = None
    proxy: tuple[str, str] | None = None
    timeout: float | None = None
    no_index: str | None = None  # the setting that turned indexes off

    def hint(self) -> str:
        """Which settings chose the indexes: what a user should check."""
        where = [ENV_OVERRIDE] if any(i.setting == ENV_OVERRIDE for i in self.indexes) else []
        if not where:
            where = ["PIP_INDEX_URL / PIP_EXTRA_INDEX_URL"]
            where.append("index-url / extra-index-url in " + (", ".join(self.index_files) or "pip.conf"))
            where.append(f"or set {ENV_OVERRIDE}")
        return "check " + ", ".join(where)


def redact(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.password is not None else "***@"
    return urllib.parse.urlunsplit(parts._replace(netloc=user + host))


def pip_config_files(environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """``(kind, path)`` of pip's config files in pip's override order: global, user,
    site, then ``$PIP_CONFIG_FILE``; a later file's value wins. ``PIP_CONFIG_FILE`` set
    to the null device turns them all off; an existing ``PIP_CONFIG_FILE`` skips the
    user files (both as pip 23-25 do)."""
    env = os.environ if environ is None else environ
    named = env.get("PIP_CONFIG_FILE")
    if named is not None and named == os.devnull:
        return []
    base = "pip.ini" if sys.platform == "win32" else "pip.conf"
    home = os.path.expanduser("~")
    if sys.platform == "win32":
        program_data = env.get("ALLUSERSPROFILE") or env.get("PROGRAMDATA") or r"C:\ProgramData"
        global_dirs = [os.path.join(program_data, "pip")]
        user_dirs = [os.path.join(home, "pip"), os.path.join(env.get("APPDATA") or os.path.join(home, "AppData", "Roaming"), "pip")]
    elif sys.platform == "darwin":
        global_dirs = ["/Library/Application Support/pip"]
        mac_user = os.path.join(home, "Library", "Application Support", "pip")
        user_dirs = [os.path.join(home, ".pip"), mac_user if os.path.isdir(mac_user) else os.path.join(home, ".config", "pip")]
    else:
        xdg_dirs = env.get("XDG_CONFIG_DIRS") or "/etc/xdg"
        global_dirs = [os.path.join(d, "pip") for d in xdg_dirs.split(os.pathsep) if d] + ["/etc"]
        user_dirs = [os.path.join(home, ".pip"), os.path.join(env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "pip")]
    out = [("global", os.path.join(d, base)) for d in global_dirs]
    if not (named and os.path.exists(named)):
        out += [("user", os.path.join(d, base)) for d in user_dirs]
    out.append(("site", os.path.join(sys.prefix, base)))
    if named:
        out.append(("PIP_CONFIG_FILE", named))
    return out


def _read_config(files: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(section, key): (value, file)}`` merged in order (a later file wins)."""
    merged: dict[tuple[str, str], tuple[str, str]] = {}
    for _, path in files:
        if not os.path.isfile(path):
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding=locale.getpreferredencoding(False))
        except (configparser.Error, UnicodeDecodeError, OSError) as e:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise FetchError(f"cannot read pip's config file {path} (pip cannot either): {why}") from None
        for section in parser.sections():
            for key, value in parser.items(section):
                merged[(section.lower(), key.lower().replace("_", "-"))] = (value, path)
    return merged


def pip_settings(environ: dict[str, str] | None = None, config_files: list[tuple[str, str]] | None = None) -> PipSettings:
    """The indexes (and TLS, proxy, timeout settings) pip would use, and where each came from.

    Precedence, as pip's: a ``PIP_<NAME>`` environment variable, then the command's
    section of the config files (``[download]``, then ``[install]``), then
    ``[global]``; within one section the later file in :func:`pip_config_files` wins.
    Empty values are ignored, as pip ignores them. ``$SPECDESK_PYPI_URL`` overrides
    the indexes (a bare host such as ``https://pypi.org`` means its ``/simple``)."""
    env = os.environ if environ is None else environ
    files = pip_config_files(env) if config_files is None else config_files
    config = _read_config(files)

    def option(*names: str) -> tuple[str, str] | None:
        for name in names:
            var = "PIP_" + name.upper().replace("-", "_")
            if env.get(var, "").strip():
                return env[var].strip(), var
        for section in reversed(_SECTIONS):
            for name in names:
                hit = config.get((section, name))
                if hit and hit[0].strip():
                    return hit[0].strip(), f"{name} in [{section}] of {hit[1]}"
        return None

    override = env.get(ENV_OVERRIDE, "").split()
    no_index = None
    if override:
        indexes = [Index(_simple_root(u), ENV_OVERRIDE) for u in override]
    else:
        indexes = []
        flag = option("no-index")
        if flag and flag[0].lower() in ("1", "true", "yes", "on"):
            no_index = flag[1]
        else:
            primary = option("index-url", "i")
            indexes.append(Index(primary[0], primary[1]) if primary else Index(DEFAULT_INDEX, "pip's default"))
            extra = option("extra-index-url")
            if extra:
                indexes += [Index(u, extra[1]) for u in extra[0].split()]
    timeout = option("timeout", "default-timeout")
    try:
        seconds = float(timeout[0]) if timeout else None
    except ValueError:
        seconds = None
    return PipSettings(
        indexes=tuple(indexes),
        config_files=tuple(p for _, p in files),
        index_files=tuple(dict.fromkeys(path for (_, key), (_, path) in config.items()
                                        if key in ("index-url", "i", "extra-index-url", "no-index"))),
        cert=option("cert"),
        client_cert=option("client-cert"),
        proxy=option("proxy"),
        timeout=seconds,
        no_index=no_index,
    )


def _simple_root(url: str) -> str:
    """``https://pypi.org`` (the old base URL this setting took) means its ``/simple``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("http", "https") and parts.path in ("", "/"):
        return url.rstrip("/") + "/simple/"
    return url


