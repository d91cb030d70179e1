"""Pydantic's validation errors as one OpenAI-style line naming the field."""

from __future__ import annotations

from typing import Sequence

from .errors import APIError


def param_path(loc: Sequence) -> str | None:
    """``("body", "messages", 0, "content")`` -> ``messages[0].content``."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part) in ("str", "list[ContentPart]", "list[str]", "function-after", "dict[str,any]") or "[" in str(part):
            continue  # pydantic names the union member it tried: not a field
        else:
            out += ("." if out else "") + str(part)
    return out or None


def validation_error(errors: Sequence[dict]) -> APIError:
    """The first error, in words; how many more there are."""
    if not errors:
        return APIError(400, "the request is not valid")
    # A field that takes a string or a list (a message's content) gets an error from each
    # branch; for a list given, "should be a valid string" misleads: the list's own error says
    # what is wrong inside it
    errors = [x for x in errors if not (x.get("type") == "string_type" and isinstance(x.get("input"), (list, dict)))] or errors
    e = errors[0]
    kind = e.get("type", "")
    param = param_path(e.get("loc", ()))
    if kind == "json_invalid":
        detail = (e.get("ctx") or {}).get("error", "")
        return APIError(400, f"the body is not valid JSON{': ' + str(detail) if detail else ''}", code="invalid_json")
    if kind == "extra_forbidden":
        return APIError(400, f"unsupported field '{param}': this server does not implement it", param=param,
                        code="unsupported_parameter")
    if kind == "missing" and param is None:  # no body at all
        return APIError(400, "the body is empty: send a JSON object", code="missing_required_parameter")
    if kind == "missing":
        return APIError(400, f"'{param}' is required", param=param, code="missing_required_parameter")
    if param == "messages" and kind == "too_short":
        return APIError(400, "'messages' is empty: send at least one message", param=param)
    if param is None:
        return APIError(400, f"the body must be a JSON object: {e.get('msg', '')}")
    more = len({str(x.get("loc")) for x in errors}) - 1
    tail = f" ({more} more problem{'s' if more > 1 else ''} after this one)" if more > 0 else ""
    return APIError(400, f"'{param}': {e.get('msg', 'invalid')}, got {_short(e.get('input'))}{tail}", param=param)


def _short(value: object, limit: int = 60) -> str:
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 3] + "..."
