"""Errors of huggingface_hub and of the network as one-line ``DownloadError`` messages."""

from __future__ import annotations

import errno
from pathlib import Path

from ...errors import SpecDeskError


class DownloadError(SpecDeskError):
    """Listing or downloading from the Hugging Face Hub failed."""


def _one_line(text: object, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _network_error_types() -> tuple[type[BaseException], ...]:
    import httpx2

    return (httpx2.TransportError,)


def _map_error(e: BaseException, *, repo_id: str, revision: str | None, endpoint: str,
               filename: str | None = None, token: str | None = None, cache: Path | None = None) -> SpecDeskError:
    """A huggingface_hub/httpx error as a one-line ``DownloadError`` (SpecDeskErrors pass)."""
    if isinstance(e, SpecDeskError):
        return e
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    rev = revision or "main"
    token_hint = "set HF_TOKEN to a token that has access (or run `hf auth login`)"
    if isinstance(e, HFValidationError):
        return DownloadError(f"invalid repo id or file name: {_one_line(e)}")
    if isinstance(e, OfflineModeIsEnabled):
        return DownloadError(f"cannot reach {endpoint} for {repo_id}: HF_HUB_OFFLINE is set")
    if isinstance(e, GatedRepoError):
        status = e.response.status_code if e.response is not None else None
        if status == 403 or token:
            return DownloadError(f"{repo_id} is gated and your token has no access to it: "
                                 f"accept its conditions at {endpoint}/{repo_id}")
        return DownloadError(f"{repo_id} is gated: accept its conditions at {endpoint}/{repo_id}, then {token_hint}")
    if isinstance(e, RepositoryNotFoundError):
        return DownloadError(f"repository '{repo_id}' not found on {endpoint} (if it is private, {token_hint})")
    if isinstance(e, RevisionNotFoundError):
        return DownloadError(f"revision '{rev}' not found in {repo_id}")
    if isinstance(e, RemoteEntryNotFoundError):
        what = f"file '{filename}'" if filename else "file"
        return DownloadError(f"{what} not found in {repo_id} at revision '{rev}'")
    if isinstance(e, HfHubHTTPError):
        status = e.response.status_code if e.response is not None else None
        what = f"{filename} in {repo_id}" if filename else repo_id
        if status == 401:
            return DownloadError(f"unauthorized (HTTP 401) for {what}: the repo may be private or gated; {token_hint}")
        if status == 403:
            return DownloadError(f"access denied (HTTP 403) for {what}: {token_hint}")
        if status == 429:
            return DownloadError(f"{endpoint} is rate-limiting requests (HTTP 429) for {what}; try again later")
        return DownloadError(f"{endpoint} answered HTTP {status} for {what}")
    if isinstance(e, _network_error_types()):
        return DownloadError(f"cannot reach {endpoint}: {_one_line(e) or type(e).__name__}; "
                             "check the network connection (and HF_ENDPOINT if set)")
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        where = f" to {cache}" if cache is not None else ""
        return DownloadError(f"no space left on device while downloading {filename or repo_id}{where}")
    if isinstance(e, (OSError, ValueError, RuntimeError)):
        return DownloadError(f"{filename or repo_id} from {repo_id}: {_one_line(e)}")
    raise e


def _offline_error_types() -> tuple[type[BaseException], ...]:
    from huggingface_hub.errors import OfflineModeIsEnabled

    return (OfflineModeIsEnabled, *_network_error_types())
