"""The request bodies of the OpenAI-compatible endpoints, validated by pydantic.

Types are strict (a temperature of "hot" or a ``stream`` of 1 is refused, not
coerced) and unknown fields are refused by name. Fields OpenAI defines that this
server does not implement (``n`` > 1, ``tools``, ``logprobs``, images, penalties, ...)
are accepted only at their neutral value; any other value is a 400 naming the field,
never a silent ignore. Nothing in a request names a file: the served pair is fixed
when the server starts.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from .errors import APIError

STRICT = ConfigDict(strict=True, extra="forbid")


class StreamOptions(BaseModel):
    model_config = STRICT
    include_usage: bool = False


class ContentPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = STRICT
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Union[str, list[ContentPart], None] = None
    name: str | None = None
    # what a client echoes back from an earlier answer; only their empty values are accepted
    tool_calls: list[Any] | None = None
    tool_call_id: str | None = None
    function_call: Any = None
    refusal: str | None = None


class _Common(BaseModel):
    """The sampling fields both endpoints share (top_k and min_p as llama-server takes them)."""

    model_config = STRICT
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0.0, lt=1.0)
    seed: int | None = None
    stop: Union[str, list[str], None] = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # defined by OpenAI, not implemented here: neutral values only (see refuse_unsupported)
    n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    tool_choice: Union[str, dict[str, Any], None] = None
    parallel_tool_calls: bool | None = None
    functions: list[Any] | None = None
    function_call: Union[str, dict[str, Any], None] = None
    response_format: dict[str, Any] | None = None


class CompletionRequest(_Common):
    prompt: Union[str, list[str]]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    logprobs: int | None = None
    #: SpecDesk: parse special-token text (``<|im_start|>``) as those tokens, as llama.cpp's tools do
    parse_special: bool = True


def _refuse(param: str, what: str) -> APIError:
    return APIError(400, f"'{param}' {what} is not supported by this server", param=param, code="unsupported_parameter")


def refuse_unsupported(req: _Common) -> None:
    """A 400 naming the first field set to something this server does not do."""
    if req.n not in (None, 1):
        raise _refuse("n", f"= {req.n} (one choice per request)")
    for name in ("presence_penalty", "frequency_penalty"):
        v = getattr(req, name)
        if v not in (None, 0, 0.0):
            raise _refuse(name, f"= {v}")
    if req.logit_bias:
        raise _refuse("logit_bias", "(token biases)")
    if isinstance(req.stop, list) and len(req.stop) > 4:
        raise APIError(400, f"'stop' holds {len(req.stop)} strings; at most 4", param="stop")
    if isinstance(req, ChatRequest):
        _refuse_chat(req)
    elif isinstance(req, CompletionRequest):
        _refuse_completion(req)


def _refuse_chat(req: ChatRequest) -> None:
    if req.logprobs:
        raise _refuse("logprobs", "(log probabilities)")
    if req.top_logprobs:
        raise _refuse("top_logprobs", "(log probabilities)")
    if req.tools:
        raise _refuse("tools", "(tool calls)")
    if req.functions:
        raise _refuse("functions", "(function calls)")
    if req.tool_choice not in (None, "none", "auto"):
        raise _refuse("tool_choice", "(tool calls)")
    if req.function_call not in (None, "none", "auto"):
        raise _refuse("function_call", "(function calls)")
    if req.response_format is not None and req.response_format.get("type", "text") != "text":
        raise _refuse("response_format", f"of type {req.response_format.get('type')!r}")
    if req.max_tokens is not None and req.max_completion_tokens is not None and req.max_tokens != req.max_completion_tokens:
        raise APIError(400, f"'max_tokens' ({req.max_tokens}) and 'max_completion_tokens' ({req.max_completion_tokens}) "
                            "disagree; give one", param="max_completion_tokens")


def _refuse_completion(req: CompletionRequest) -> None:
    if req.echo:
        raise _refuse("echo", "(echoing the prompt)")
    if req.suffix:
        raise _refuse("suffix", "(fill-in-the-middle)")
    if req.best_of not in (None, 1):
        raise _refuse("best_of", f"= {req.best_of}")
    if req.logprobs:
        raise _refuse("logprobs", "(log probabilities)")
    if isinstance(req.prompt, list) and len(req.prompt) != 1:
        raise APIError(400, f"'prompt' holds {len(req.prompt)} prompts; this server answers one per request", param="prompt")


def chat_messages(req: ChatRequest) -> list[dict]:
    """The messages as the chat template takes them (``developer`` is OpenAI's newer
    name for ``system``); a 400 for what a text model without tools cannot take."""
    out = []
    for i, m in enumerate(req.messages):
        where = f"messages[{i}]"
        if m.role in ("tool", "function") or m.tool_call_id:
            raise APIError(400, f"{where}: '{m.role}' messages are not supported: this server does not call tools",
                           param=f"{where}.role", code="unsupported_parameter")
        if m.tool_calls or m.function_call:
            raise APIError(400, f"{where}: tool calls are not supported by this server", param=f"{where}.tool_calls",
                           code="unsupported_parameter")
        out.append({"role": "system" if m.role == "developer" else m.role, "content": _text(m, where)})
    return out


def _encodable(text: str, param: str) -> str:
    """The text, if it can be encoded as UTF-8: JSON's ``\\ud800`` escapes decode to
    lone UTF-16 surrogates, which no tokenizer takes (a 400 naming the field, not a 500)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start]
        raise APIError(400, f"'{param}' holds an unpaired UTF-16 surrogate (\\u{ord(bad):04x}) at character {e.start}: "
                            "not text; send a valid pair or the character itself", param=param) from None
    return text


def _text(m: ChatMessage, where: str) -> str:
    if m.content is None:
        if m.role == "assistant":
            return ""
        raise APIError(400, f"{where}.content is required", param=f"{where}.content")
    if isinstance(m.content, str):
        return _encodable(m.content, f"{where}.content")
    parts = []
    for j, part in enumerate(m.content):
        if part.type != "text":
            kind = "images are" if part.type == "image_url" else f"'{part.type}' content is"
            raise APIError(400, f"{where}.content[{j}]: {kind} not supported: this server serves a text model",
                           param=f"{where}.content[{j}].type", code="unsupported_parameter")
        if part.text is None:
            raise APIError(400, f"{where}.content[{j}].text is required", param=f"{where}.content[{j}].text")
        parts.append(_encodable(part.text, f"{where}.content[{j}].text"))
    return "\n".join(parts)


def completion_prompt(req: CompletionRequest) -> str:
    return _encodable(req.prompt if isinstance(req.prompt, str) else req.prompt[0], "prompt")


def stop_strings(req: _Common) -> list[str]:
    if req.stop is None:
        return []
    return [req.stop] if isinstance(req.stop, str) else list(req.stop)
