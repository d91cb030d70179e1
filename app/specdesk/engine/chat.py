"""Chat prompts from the GGUF's own chat template, rendered in a sandbox with a budget.

A chat template is Jinja code that came with an untrusted file, so it runs in
Jinja's ImmutableSandboxedEnvironment (no attribute access to Python internals,
no mutation of the inputs), with the few helpers templates expect.

The sandbox keeps a template from reaching Python, not from running forever:
nested loops or a string doubled forty times would freeze the caller. So every
render runs under a :class:`Budget`, checked as the template runs (no thread, no
process): every loop iteration, call, filter and intercepted operator counts a
step, and each checks the clock; strings, lists and ints a template builds, and
the text it writes, are limited in size, and operations that would build a huge
value at once (``'x' * 10**10``, ``10 ** 10**8``, ``'%999999999d'``, a filter or
method called with a huge width) are refused before they run. A template over its
budget stops with a one-line :class:`SpecDeskError`.

Strict templates (Mistral, Gemma, Llama 2) raise unless the roles alternate:
:func:`valid_roles` repairs a history and :func:`drop_oldest_turn` shortens one
from the oldest side, both keeping the roles such a template accepts.
"""

from __future__ import annotations

import datetime
import functools
import re
import time
from dataclasses import dataclass
from typing import Any, Sequence

from jinja2 import Environment, TemplateError, nodes
from jinja2.nodes import EvalContext
from jinja2.runtime import Context, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from ..errors import SpecDeskError

# Used when a GGUF carries no template: ChatML, what most small instruct models use.
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class TemplateBudgetError(SpecDeskError):
    """A chat template ran past its time, step or size budget."""


@dataclass(frozen=True)
class Budget:
    """What one render may spend. Real templates use a few hundred steps and write
    about the size of the chat; the defaults leave them orders of magnitude of room."""

    seconds: float = 1.0  # wall clock for the whole render
    steps: int = 1_000_000  # loop iterations + calls + filters + operators
    chars: int = 8 << 20  # any one string/list/int (in chars, items or digits) and the output; plus 2x the input


DEFAULT_BUDGET = Budget()

_STEP_CLOCK_EVERY = 256  # read the clock every this many steps
_MAX_INT_BITS = 1 << 16  # a * b and a ** b refused when the int result would have more bits
_PERCENT_WIDTH = re.compile(r"%[-#0 +]*(?:\*|\d{5,})|%[-#0 +]*\d*\.(?:\*|\d{5,})")
_BRACE_WIDTH = re.compile(r"\{[^{}]*:[^{}]*\d{5,}[^{}]*\}|\{[^{}]*:[^{}]*\{")


def _raise(msg: str):
    raise TemplateError(msg)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _size(x: Any) -> int:
    """How big a value is for the budget: chars of a string, items of a container,
    digits of an int; 0 for anything else."""
    if isinstance(x, bool):
        return 0
    if isinstance(x, int):
        return abs(x) if abs(x) < (1 << 62) else (1 << 62)
    if isinstance(x, (str, bytes, list, tuple, dict, set, frozenset, range)):
        return len(x)
    return 0


def _result_size(x: Any) -> int:
    if isinstance(x, bool):
        return 0
    if isinstance(x, int):
        return (x.bit_length() * 30103) // 100000 + 1  # decimal digits
    return _size(x) if not isinstance(x, range) else 0  # a range is lazy; the sandbox caps it


class _Meter:
    """The running count of one render, checked by the sandbox hooks below."""

    def __init__(self, budget: Budget, input_chars: int) -> None:
        self.budget = budget
        self.max_chars = budget.chars + 2 * input_chars
        self.deadline = time.monotonic() + budget.seconds
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.budget.steps:
            raise TemplateBudgetError(f"it ran more than {self.budget.steps:,} steps (loops, calls, filters)")
        if self.steps % _STEP_CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            raise TemplateBudgetError(f"it ran longer than {self.budget.seconds:g} s")

    def check_result(self, value: Any) -> Any:
        n = _result_size(value)
        if n > self.max_chars:
            raise TemplateBudgetError(f"it built a value of {n:,} characters/items (limit {self.max_chars:,})")
        return value

    def check_estimate(self, first: Any, others: Sequence[Any]) -> None:
        """Refuse a call whose result could be huge before it runs: a text (or list)
        times the largest width, count or text among the other arguments bounds what
        indent/center/replace/join/ljust/format... can build."""
        rest = max((_size(a) for a in others), default=0)
        estimate = (1 + _size(first)) * (1 + rest)
        if estimate > self.max_chars:
            raise TemplateBudgetError(
                f"it called something that could build {estimate:,} characters (limit {self.max_chars:,})"
            )


class _BudgetNamespace(Namespace):
    """``namespace()`` whose attributes are size-checked when set: a loop that keeps
    doubling ``ns.s`` stops at the limit instead of taking all memory."""

    _meter: _Meter | None = None

    def __setitem__(self, name: str, value: Any) -> None:
        meter = type(self)._meter
        if meter is not None:
            meter.step()
            meter.check_result(value)
        super().__setitem__(name, value)


class _BudgetEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, meter: _Meter) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        self.meter = meter
        ns_class = type("namespace", (_BudgetNamespace,), {"_meter": meter})
        self.globals.pop("lipsum", None)  # lipsum(n) writes n paragraphs; no template needs it
        self.globals.update(raise_exception=_raise, strftime_now=_strftime_now, namespace=ns_class)
        self._trusted = {id(v) for v in (_raise, _strftime_now, ns_class, self.globals.get("range"))}
        self.filters = {name: self._wrap_filter(f) for name, f in self.filters.items()}
        self.filters["_budget_iter"] = self._budget_iter
        self.filters["_budget_value"] = self._budget_value

    # -- hooks the compiled template calls ------------------------------------------------

    def _wrap_filter(self, f):
        meter = self.meter

        @functools.wraps(f)  # keeps jinja_pass_arg (pass_context/pass_environment/...)
        def wrapped(*args, **kwargs):
            meter.step()
            values = [a for a in args if not _is_jinja_internal(a)]
            if values:
                meter.check_estimate(values[0], [*values[1:], *kwargs.values()])
            return meter.check_result(f(*args, **kwargs))

        return wrapped

    def _budget_iter(self, iterable):
        for item in iterable:
            self.meter.step()
            yield item

    def _budget_value(self, value):
        self.meter.step()
        return self.meter.check_result(value)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's own signature
        meter = __self.meter
        meter.step()
        if id(__obj) not in __self._trusted and not isinstance(__obj, Macro):
            target = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
            owner = getattr(target, "__self__", None)
            if owner is not None and not _is_module(owner):
                if isinstance(owner, str) and getattr(target, "__name__", "") in ("format", "format_map"):
                    _check_format(owner, "{}")
                meter.check_estimate(owner, [*args, *kwargs.values()])
            elif args:
                meter.check_estimate(args[0], [*args[1:], *kwargs.values()])
        return meter.check_result(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context, op: str, left: Any, right: Any) -> Any:
        meter = self.meter
        meter.step()
        ints = isinstance(left, int) and isinstance(right, int)
        if op == "*":
            if ints:
                if abs(left).bit_length() + abs(right).bit_length() > _MAX_INT_BITS:
                    raise TemplateBudgetError(f"it multiplied numbers past {_MAX_INT_BITS:,} bits")
            else:
                for seq, n in ((left, right), (right, left)):
                    if isinstance(n, int) and not isinstance(n, bool):
                        meter.check_estimate(seq, [n])
        elif op == "**" and ints and right > 0 and abs(left) > 1:
            if abs(left).bit_length() * right > _MAX_INT_BITS:
                raise TemplateBudgetError(f"it computed a power past {_MAX_INT_BITS:,} bits")
        elif op == "%" and isinstance(left, str):
            _check_format(left, "%")
            meter.check_estimate(left, list(right) if isinstance(right, tuple) else [right])
        return meter.check_result(super().call_binop(context, op, left, right))

    def getattr(self, obj, attribute):
        self.meter.step()
        return super().getattr(obj, attribute)

    def getitem(self, obj, argument):
        self.meter.step()
        return super().getitem(obj, argument)


def _is_jinja_internal(x: Any) -> bool:
    # pass_context / pass_eval_context / pass_environment filters get these first
    return isinstance(x, (Context, EvalContext, Environment))


def _is_module(x: Any) -> bool:
    return type(x).__name__ == "module"


def _check_format(fmt: str, style: str) -> None:
    """Refuse format widths/precisions that would pad to millions of characters."""
    pattern = _PERCENT_WIDTH if style == "%" else _BRACE_WIDTH
    if pattern.search(fmt):
        raise TemplateBudgetError("it formatted with a huge or computed width")


def _instrument(ast: nodes.Template) -> nodes.Template:
    """Count every loop iteration and size-check every ``~`` concatenation."""
    for loop in ast.find_all(nodes.For):
        loop.iter = nodes.Filter(loop.iter, "_budget_iter", [], [], None, None, lineno=loop.lineno)
    for parent in list(ast.find_all(nodes.Node)):
        for field in parent.fields:
            value = getattr(parent, field, None)
            if isinstance(value, nodes.Concat):
                setattr(parent, field, nodes.Filter(value, "_budget_value", [], [], None, None, lineno=value.lineno))
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, nodes.Concat):
                        value[i] = nodes.Filter(item, "_budget_value", [], [], None, None, lineno=item.lineno)
    return ast


def _one_line(text: object, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def render_chat(
    template: str | None,
    messages: Sequence[dict],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    budget: Budget = DEFAULT_BUDGET,
) -> str:
    """The prompt text of ``messages`` by ``template`` (ChatML when None).

    Raises a one-line SpecDeskError when the template fails, raises (e.g. roles that
    do not alternate), or goes over ``budget`` (:class:`TemplateBudgetError`)."""
    msgs = [dict(m) for m in messages]
    input_chars = sum(len(str(m.get("content", ""))) for m in msgs)
    meter = _Meter(budget, input_chars)
    env = _BudgetEnvironment(meter)
    out: list[str] = []
    try:
        tpl = env.from_string(_instrument(env.parse(template or CHATML)))
        written = 0
        for chunk in tpl.generate(
            messages=msgs,
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
            tools=None,
        ):
            written += len(chunk)
            if written > meter.max_chars:
                raise TemplateBudgetError(f"it wrote more than {meter.max_chars:,} characters")
            out.append(chunk)
            meter.step()
    except TemplateBudgetError as e:
        raise TemplateBudgetError(f"the model's chat template was stopped: {e}") from None
    except TemplateError as e:
        raise SpecDeskError(f"the model's chat template failed: {_one_line(e)}") from None
    except RecursionError:
        raise SpecDeskError("the model's chat template failed: it recursed too deeply") from None
    except MemoryError:
        raise TemplateBudgetError("the model's chat template was stopped: it ran out of memory") from None
    except Exception as e:  # noqa: BLE001 - untrusted code: any error of it is the template's
        raise SpecDeskError(f"the model's chat template failed: {type(e).__name__}: {_one_line(e)}") from None
    return "".join(out)


# --------------------------------------------------------------------------------------
# Roles that strict templates accept
# --------------------------------------------------------------------------------------


def valid_roles(messages: Sequence[dict]) -> list[dict]:
    """``messages`` in the shape every strict template accepts: one optional system
    message first, then user and assistant alternating, starting with user.

    Repairs, oldest side first: a system message that is not first is dropped, so
    are assistant messages before the first user message; of two messages in a row
    with the same role, the earlier is dropped (a user message whose send failed,
    an answer replaced). Pure: the dicts are not modified."""
    out: list[dict] = []
    start = 0
    if messages and messages[0].get("role") == "system":
        out.append(messages[0])
        start = 1
    for m in messages[start:]:
        role = m.get("role")
        if role == "system":
            continue
        body = out[1:] if out and out[0].get("role") == "system" else out
        if not body and role != "user":
            continue  # the history must start with a user message
        if body and body[-1].get("role") == role:
            out[-1] = m  # keep the later of two in a row
            continue
        out.append(m)
    return out


def drop_oldest_turn(messages: Sequence[dict]) -> list[dict] | None:
    """``messages`` (made valid by :func:`valid_roles`) with the oldest user turn and
    its answer left out; a leading system message stays. None when nothing can be
    dropped: only the system message and the last user turn (or less) remain.

    For a prompt that does not fit, call it until the prompt fits or it returns None."""
    msgs = valid_roles(messages)
    head = msgs[:1] if msgs and msgs[0].get("role") == "system" else []
    body = msgs[len(head):]
    if len(body) <= 1:
        return None
    # body starts with a user message; drop it and everything up to the next user message
    nxt = next((i for i in range(1, len(body)) if body[i].get("role") == "user"), None)
    if nxt is None:
        return None  # user, assistant: the last turn; nothing older to drop
    return head + body[nxt:]


__all__ = [
    "Budget",
    "CHATML",
    "DEFAULT_BUDGET",
    "TemplateBudgetError",
    "drop_oldest_turn",
    "render_chat",
    "valid_roles",
]
