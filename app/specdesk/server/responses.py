"""Response bodies and stream chunks in OpenAI's shapes, with what speculation did.

Every finished answer carries, next to OpenAI's ``usage``:
- ``timings``, in llama-server's names (``prompt_n``, ``predicted_per_second``,
  ``draft_n``, ``draft_n_accepted``, ...), plus ``queue_ms``, the time it waited;
- ``speculation``: the proposer, k (or auto's decisions), acceptance, tokens per
  verify step, and drafted/accepted counts per draft position.
All of it comes from the generation's own counters (``Stats``), so it adds up.
"""

from __future__ import annotations

import time
import uuid

from .. import __version__
from ..session import GenerationConfig
from ..speculative.stats import Stats

FINISH = {"eos": "stop", "max_tokens": "length", "context": "length", "stop": "stop"}
FINGERPRINT = f"specdesk-{__version__}"


def _ms(seconds: float) -> float:
    return round(1000.0 * seconds, 3)


def _per_token_ms(seconds: float, n: int) -> float | None:
    return round(1000.0 * seconds / n, 3) if n else None


def _per_second(n: int, seconds: float) -> float | None:
    return n / seconds if seconds > 0 else None


def usage(st: Stats) -> dict:
    return {
        "prompt_tokens": st.prompt_tokens,
        "completion_tokens": st.generated,
        "total_tokens": st.prompt_tokens + st.generated,
        # the prompt's start the target still held from the previous request
        "prompt_tokens_details": {"cached_tokens": st.prompt_tokens - st.prompt_evaluated},
    }


def timings(st: Stats, queue_seconds: float) -> dict:
    return {
        "cache_n": st.prompt_tokens - st.prompt_evaluated,
        "prompt_n": st.prompt_evaluated,
        "prompt_ms": _ms(st.prompt_seconds),
        "prompt_per_token_ms": _per_token_ms(st.prompt_seconds, st.prompt_evaluated),
        "prompt_per_second": _per_second(st.prompt_evaluated, st.prompt_seconds),
        "predicted_n": st.generated,
        "predicted_ms": _ms(st.decode_seconds),
        "predicted_per_token_ms": _per_token_ms(st.decode_seconds, st.generated),
        "predicted_per_second": _per_second(st.generated, st.decode_seconds),
        "draft_n": st.drafted,
        "draft_n_accepted": st.accepted,
        "queue_ms": _ms(queue_seconds),
    }


def speculation(st: Stats, config: GenerationConfig, draft_model: str | None, translated: bool) -> dict:
    return {
        "proposer": config.proposer,
        "k": config.k,
        "draft_model": draft_model if config.needs_draft else None,
        "translated": bool(translated and config.needs_draft),
        "steps": st.steps,
        "draft_steps": st.draft_steps,
        "drafted": st.drafted,
        "accepted": st.accepted,
        "acceptance_rate": st.acceptance_rate,
        "tokens_per_step": st.mean_accepted_length,
        "drafted_per_position": list(st.drafted_per_position),
        "accepted_per_position": list(st.accepted_per_position),
        "acceptance_per_position": st.acceptance_per_position,
        # why the controller drafted what it did: steps per kind of decision
        "decisions": dict(st.decisions),
        "last_decision": st.last_decision,
        "draft_seconds": st.draft_seconds,
        "verify_seconds": st.verify_seconds,
    }


class Answer:
    """The ids, names and shapes of one response (chat or text completion)."""

    def __init__(self, kind: str, model: str, config: GenerationConfig, draft_model: str | None, translated: bool) -> None:
        self.kind = kind  # "chat" | "completion"
        self.model = model
        self.config = config
        self.draft_model = draft_model
        self.translated = translated
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    @property
    def object(self) -> str:
        return "chat.completion" if self.kind == "chat" else "text_completion"

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "system_fingerprint": FINGERPRINT}

    def _choice(self, text: str | None, finish: str | None, first: bool = False, chunk: bool = False) -> dict:
        if self.kind == "completion":
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        if chunk:
            delta: dict = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None}, "logprobs": None,
                "finish_reason": finish}

    def extras(self, st: Stats, queue_seconds: float) -> dict:
        return {"timings": timings(st, queue_seconds),
                "speculation": speculation(st, self.config, self.draft_model, self.translated)}

    def complete(self, text: str, finish: str, st: Stats, queue_seconds: float) -> dict:
        out = self._head(self.object)
        out["choices"] = [self._choice(text, finish)]
        out["usage"] = usage(st)
        out.update(self.extras(st, queue_seconds))
        return out

    def chunk(self, text: str | None, finish: str | None = None, first: bool = False, with_usage: bool = False) -> dict:
        out = self._head("chat.completion.chunk" if self.kind == "chat" else "text_completion")
        out["choices"] = [self._choice(text, finish, first=first, chunk=True)]
        if with_usage:
            out["usage"] = None  # OpenAI: null on every chunk but the last one
        return out

    def final_chunk(self, finish: str, st: Stats, queue_seconds: float, with_usage: bool) -> dict:
        out = self.chunk(None if self.kind == "chat" else "", finish, with_usage=with_usage)
        out.update(self.extras(st, queue_seconds))
        return out

    def usage_chunk(self, st: Stats, queue_seconds: float) -> dict:
        out = self._head("chat.completion.chunk" if self.kind == "chat" else "text_completion")
        out["choices"] = []
        out["usage"] = usage(st)
        out.update(self.extras(st, queue_seconds))
        return out
