"""Where pip would look for packages: the index URLs, find-links, TLS, trusted hosts,
proxy, timeout and retry settings from the same places pip reads them (``PIP_*``
environment variables, then pip's config files: ``PIP_CONFIG_FILE``, the global, user
and site ``pip.conf``), in pip's order of precedence, with ``SPECDESK_PYPI_URL`` above
the index settings."""

from __future__ import annotations

import configparser
import ipaddress
import locale
import os
import sys
import urllib.parse
from dataclasses import dataclass

from ..errors import FetchError

DEFAULT_INDEX = "https://pypi.org/simple"
ENV_OVERRIDE = "SPECDESK_PYPI_URL"
_TIMEOUT = 60.0
# retries of a failed connection or a transient HTTP status when pip's retries is not set:
# pip's own default
DEFAULT_RETRIES = 5
# command sections of pip.conf read after [global] (later wins): pip download reads
# [download]; users who configure pip for installing often write [install]
_SECTIONS = ("global", "install", "download")
# pip's SECURE_ORIGINS (network/session.py): (scheme, host or network, port); None: no port
_SECURE_ORIGINS: tuple[tuple[str, str, str | int | None], ...] = (
    ("https", "*", "*"), ("*", "localhost", "*"), ("*", "127.0.0.0/8", "*"), ("*", "::1/128", "*"),
    ("file", "*", None), ("ssh", "*", "*"))


@dataclass(frozen=True)
class Index:
    """One package index and the setting it came from (for messages)."""

    url: str  # as configured, credentials included (for find-links: a URL or a local path)
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
    find_links: tuple[Index, ...] = ()  # pip's find-links: local folders, HTML files or pages of links
    trusted_hosts: tuple[tuple[str, int | None], ...] = ()  # (host, port or None for any port)
    trusted_setting: str | None = None  # the setting that named them
    retries: tuple[int, str] | None = None  # (count, setting); None: SpecDesk's default

    def hint(self) -> str:
        """Which settings chose the indexes and find-links: what a user should check."""
        links = list(dict.fromkeys(f.setting for f in self.find_links))
        if any(i.setting == ENV_OVERRIDE for i in self.indexes):
            where = [*links, ENV_OVERRIDE]
        elif self.no_index:
            where = [*links, f"or unset {self.no_index} to use the package index"]
        else:
            where = ["PIP_INDEX_URL / PIP_EXTRA_INDEX_URL"]
            where.append("index-url / extra-index-url in " + (", ".join(self.index_files) or "pip.conf"))
            where += links
            where.append(f"or set {ENV_OVERRIDE}")
        return "check " + ", ".join(where)

    def trusts(self, url: str) -> bool:
        """Whether pip fetches ``url`` without checking its certificate: its host is a
        ``trusted-host`` (``host`` trusts every port, ``host:port`` that port only, as
        pip mounts its trusted-host adapter on ``https://host/``, ``https://host:``)."""
        parts = urllib.parse.urlsplit(url)
        host = (parts.hostname or "").lower()
        try:
            port = parts.port
        except ValueError:
            return False
        return any(host == h and (p is None or p == port) for h, p in self.trusted_hosts)

    def secure_origin(self, url: str) -> bool:
        """pip's ``is_secure_origin``: https, file, localhost and loopback addresses, and
        the trusted hosts; pip ignores an index or find-links page anywhere else."""
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.rsplit("+", 1)[-1]
        host = parts.hostname
        try:
            port = parts.port
        except ValueError:
            return False
        trusted = tuple(("*", h, "*" if p is None else p) for h, p in self.trusted_hosts)
        for want_scheme, want_host, want_port in _SECURE_ORIGINS + trusted:
            if scheme != want_scheme and want_scheme != "*":
                continue
            try:
                addr = ipaddress.ip_address(host or "")
                network = ipaddress.ip_network(want_host)
            except ValueError:
                if host and host.lower() != want_host.lower() and want_host != "*":
                    continue
            else:
                if addr not in network:
                    continue
            if port != want_port and want_port != "*" and want_port is not None:
                continue
            return True
        return False

    def retries_said(self) -> str:
        """How many retries and which setting chose them, for messages."""
        if self.retries is None:
            return f"retries {DEFAULT_RETRIES} by default: set PIP_RETRIES or retries in pip.conf"
        return f"retries {self.retries[0]} from {self.retries[1]}"


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
    links = option("find-links")
    trusted = option("trusted-host")
    return PipSettings(
        indexes=tuple(indexes),
        config_files=tuple(p for _, p in files),
        index_files=tuple(dict.fromkeys(path for (_, key), (_, path) in config.items()
                                        if key in ("index-url", "i", "extra-index-url", "no-index", "find-links"))),
        cert=option("cert"),
        client_cert=option("client-cert"),
        proxy=option("proxy"),
        timeout=seconds,
        no_index=no_index,
        find_links=tuple(Index(u, links[1]) for u in links[0].split()) if links else (),
        trusted_hosts=tuple(_host_port(h, trusted[1]) for h in trusted[0].split()) if trusted else (),
        trusted_setting=trusted[1] if trusted else None,
        retries=_retries(option("retries")),
    )


def _retries(value: tuple[str, str] | None) -> tuple[int, str] | None:
    if value is None:
        return None
    try:
        return max(0, int(value[0])), value[1]
    except ValueError:
        raise FetchError(f"{value[1]} is {value[0]!r}, not a whole number of retries (pip refuses it too)") from None


def _host_port(value: str, setting: str) -> tuple[str, int | None]:
    """pip's ``parse_netloc`` of a ``trusted-host`` entry: ``host`` or ``host:port``
    (a bare IPv6 address gets its brackets)."""
    netloc = f"[{value}]" if value.count(":") >= 2 and "[" not in value else value
    parts = urllib.parse.urlsplit("https://" + netloc)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1:
        raise FetchError(f"{setting} names {value!r}, which is not a host or host:port (pip refuses it too)")
    return parts.hostname.lower(), port


def _simple_root(url: str) -> str:
    """``https://pypi.org`` (the old base URL this setting took) means its ``/simple``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("http", "https") and parts.path in ("", "/"):
        return url.rstrip("/") + "/simple/"
    return url


