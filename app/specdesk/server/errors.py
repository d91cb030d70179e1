"""Errors in OpenAI's format: ``{"error": {"message", "type", "param", "code"}}``.

Every refusal is one line a person can act on; no traceback ever leaves the server."""

from __future__ import annotations

from typing import Mapping

TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
         405: "invalid_request_error", 413: "invalid_request_error", 422: "invalid_request_error",
         429: "rate_limit_error", 503: "server_busy", 500: "server_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None, type_: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = " ".join(message.split())  # one line
        self.param = param
        self.code = code
        self.headers = dict(headers or {})
        self.type = type_ or TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": " ".join(str(message).split()), "type": type_, "param": param, "code": code}}
