"""Chat prompts from the GGUF's own chat template, rendered in a sandbox with a budget.

A chat template is Jinja code that came with an untrusted file, so it runs in
Jinja's ImmutableSandboxedEnvironment (no attribute access to Python internals,
no mutation of the inputs), with the few helpers templates expect.

The sandbox keeps a template from reaching Python; the :class:`Budget` is its first
filter against a template that would run forever or take all memory, checked as
the template runs: every loop iteration, call, filter and intercepted operator
counts a step, and the clock is read every few hundred steps; what a call, an
operator or a ``~`` would build is estimated from its operands *before* it runs
(characters, counting the strings inside a list, the widths of a format, the digits
of a number) and refused over the budget, and so are the values built and the text
written. It cannot interrupt one C-level call, and its estimates are estimates:
:mod:`.worker` renders in a helper process that the operating system bounds
(memory and a deadline), with this sandbox inside it.

A template over its budget stops with one line, :class:`TemplateBudgetError`:
"the model's chat template needs more than ... to render; use --raw or another
template".

Strict templates (Mistral, Gemma, Llama 2) raise unless the roles alternate:
:func:`valid_roles` repairs a history and :func:`drop_oldest_turn` shortens one
from the oldest side, both keeping the roles such a template accepts.
"""

from __future__ import annotations

import datetime
import functools
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

from jinja2 import Environment, TemplateError, nodes
from jinja2.filters import do_format
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

#: What the one-line message tells the user to do instead.
HINT = "use --raw or another template"


class TemplateBudgetError(SpecDeskError):
    """A chat template needs more than its budget (time, steps, size or memory) to
    render. ``need`` says what, e.g. ``"2 s"`` or ``"8,388,608 characters"``."""

    def __init__(self, need: str) -> None:
        self.need = need
        super().__init__(f"the model's chat template needs more than {need} to render; {HINT}")


class TemplateMemoryError(TemplateBudgetError):
    """The render ran out of the memory it was given (a MemoryError inside it)."""

    def __init__(self, need: str = "the memory it was given") -> None:
        super().__init__(need)


@dataclass(frozen=True)
class Budget:
    """What one render may spend. Real templates use a few hundred steps and write
    about the size of the chat; the defaults leave them orders of magnitude of room."""

    seconds: float = 1.0  # wall clock for the whole render (read between steps)
    steps: int = 1_000_000  # loop iterations + calls + filters + operators
    chars: int = 8 << 20  # any one value built (in characters) and the output; plus 2x the input


DEFAULT_BUDGET = Budget()

_STEP_CLOCK_EVERY = 256  # read the clock every this many steps
_MAX_INT_BITS = 1 << 16  # a * b and a ** b refused when the int result would have more bits
_CHARS_DEPTH = 16  # containers nested deeper count by their items only
_MEMO_MIN_ITEMS = 16  # containers this big have their size remembered for the render
_STRFTIME_CHARS_PER_CHAR = 32  # '%c' (2 characters) writes 24; a locale's names are longer
# printf-style conversions: an optional mapping key, flags, width, precision, length, type
_PERCENT_SPEC = re.compile(r"%(?:\([^()]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?[diouxXeEfFgGcrsa%]")
_BRACE_FIELD = re.compile(r"\{[^{}]*\}")
_BRACE_NESTED = re.compile(r"\{[^{}]*:[^{}]*\{")
_DIGITS = re.compile(r"\d+")


def _raise(msg: str):
    raise TemplateError(msg)


def _digits(n: int) -> int:
    return (abs(n).bit_length() * 30103) // 100000 + 1


class _Sizes:
    """How many characters values hold, for the budget: a string's length, an int's
    digits, a container's items plus what they hold (so a list of one long string
    counts the string, and ``[s] * 60`` counts 60 of them). Counting stops as soon as
    the total passes ``limit``; containers (immutable in this sandbox) are remembered
    for the render, so a template that asks for ``messages|length`` in a loop pays once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._memo: dict[int, tuple[Any, int]] = {}

    def chars(self, x: Any, depth: int = 0) -> int:
        total = 0
        stack: list[tuple[Any, int]] = [(x, depth)]
        while stack and total <= self.limit:
            v, d = stack.pop()
            if isinstance(v, (str, bytes)):
                total += len(v)
            elif isinstance(v, bool) or v is None:
                total += 5
            elif isinstance(v, int):
                total += _digits(v)
            elif isinstance(v, float):
                total += 24
            elif isinstance(v, range):
                total += len(v) * (1 + _digits(max(abs(v.start), abs(v.stop))))
            elif isinstance(v, (list, tuple, set, frozenset, dict)):
                total += self._container(v, d, stack)
        return total

    def _container(self, v, depth: int, stack: list) -> int:
        """Its items, plus what they hold: counted here (and remembered) for a big
        container, else pushed on ``stack`` for :meth:`chars` to count."""
        known = self._memo.get(id(v))
        if known is not None and known[0] is v:
            return known[1]
        if depth >= _CHARS_DEPTH:
            return len(v)
        if len(v) < _MEMO_MIN_ITEMS:
            stack.extend((i, depth + 1) for i in _items(v))
            return len(v)
        n = len(v)
        for i in _items(v):
            n += self.chars(i, depth + 1)
            if n > self.limit:
                break
        self._memo[id(v)] = (v, n)  # the reference keeps the id from being reused
        return n

    def size(self, x: Any) -> int:
        """An argument's weight in an estimate: an int is a count or a width (its
        value); anything else its characters."""
        if isinstance(x, int) and not isinstance(x, bool):
            return min(abs(x), 1 << 62)
        return self.chars(x)


def _items(v):
    if isinstance(v, dict):
        for k, x in v.items():
            yield k
            yield x
    else:
        yield from v


class _Meter:
    """The running count of one render, checked by the sandbox hooks below."""

    def __init__(self, budget: Budget, input_chars: int) -> None:
        self.budget = budget
        self.max_chars = budget.chars + 2 * input_chars
        self.sizes = _Sizes(self.max_chars)
        self.deadline = time.monotonic() + budget.seconds
        self.steps = 0

    def over(self) -> TemplateBudgetError:
        return TemplateBudgetError(f"{self.max_chars:,} characters")

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.budget.steps:
            raise TemplateBudgetError(f"{self.budget.steps:,} steps (loops, calls, filters)")
        if self.steps % _STEP_CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            raise TemplateBudgetError(f"{self.budget.seconds:g} s")

    def check_result(self, value: Any) -> Any:
        if self.sizes.chars(value) > self.max_chars:
            raise self.over()
        return value

    def check_need(self, chars: int) -> None:
        if chars > self.max_chars:
            raise self.over()

    def check_estimate(self, first: Any, others: Sequence[Any]) -> None:
        """Refuse a call whose result could be huge before it runs: a text (or list)
        times the largest width, count or text among the other arguments bounds what
        indent/center/replace/join/ljust/format... can build."""
        rest = max((self.sizes.size(a) for a in others), default=0)
        self.check_need((1 + self.sizes.chars(first)) * (1 + rest))

    def check_format(self, fmt: str, style: str) -> None:
        """Refuse a format whose widths and precisions add up past the budget (each
        conversion pads to at least its width), or whose width is computed."""
        self.check_need(len(fmt) + _format_widths(fmt, style))


def _format_widths(fmt: str, style: str) -> int:
    """The characters the widths and precisions of a format pad to, at least; a
    computed width (``%*d``, ``{:{}}``) counts as unbounded."""
    total = 0
    if style == "%":
        for m in _PERCENT_SPEC.finditer(fmt):
            for part in m.groups():
                if part == "*":
                    return 1 << 62
                total += int(part) if part else 0
        return total
    if _BRACE_NESTED.search(fmt):
        return 1 << 62
    for field in _BRACE_FIELD.findall(fmt):
        spec = field.partition(":")[2]
        total += sum(int(d) for d in _DIGITS.findall(spec))
    return total


class _BudgetNamespace(Namespace):
    """``namespace()`` whose attributes are size-checked when set: a loop that keeps
    doubling ``ns.s`` stops at the limit instead of taking all memory."""

    _env: "_BudgetEnvironment | None" = None

    def __setitem__(self, name: str, value: Any) -> None:
        env = type(self)._env
        if env is not None and env.meter is not None:
            env.meter.step()
            env.meter.check_result(value)
        super().__setitem__(name, value)


class _BudgetEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with the budget's hooks. One environment compiles one template
    and is reused, one render at a time, each with its own :class:`_Meter`."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        self.meter: _Meter | None = None
        ns_class = type("namespace", (_BudgetNamespace,), {"_env": self})
        self.globals.pop("lipsum", None)  # lipsum(n) writes n paragraphs; no template needs it
        self.globals.update(raise_exception=_raise, strftime_now=self._strftime_now, namespace=ns_class)
        self._trusted = {id(v) for v in (_raise, ns_class, self.globals.get("range"))}
        self.filters = {name: self._wrap_filter(f) for name, f in self.filters.items()}
        self.filters["_budget_iter"] = self._budget_iter
        self.filters["_budget_concat"] = self._budget_concat

    # -- hooks the compiled template calls ------------------------------------------------

    def _strftime_now(self, fmt: str) -> str:
        fmt = str(fmt)
        self.meter.check_need(len(fmt) * _STRFTIME_CHARS_PER_CHAR)
        return datetime.datetime.now().strftime(fmt)

    def _wrap_filter(self, f):
        env = self

        @functools.wraps(f)  # keeps jinja_pass_arg (pass_context/pass_environment/...)
        def wrapped(*args, **kwargs):
            meter = env.meter
            meter.step()
            values = [a for a in args if not _is_jinja_internal(a)]
            if values:
                if f is do_format and isinstance(values[0], str):
                    meter.check_format(values[0], "%")
                meter.check_estimate(values[0], [*values[1:], *kwargs.values()])
            return meter.check_result(f(*args, **kwargs))

        return wrapped

    def _budget_iter(self, iterable):
        for item in iterable:
            self.meter.step()
            yield item

    def _budget_concat(self, parts: list) -> str:
        """``a ~ b ~ ...``, refused before the string is built when it would be too long."""
        meter = self.meter
        meter.step()
        meter.check_need(sum(meter.sizes.chars(p) for p in parts))
        return meter.check_result("".join(map(str, parts)))

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's own signature
        meter = __self.meter
        meter.step()
        trusted = id(__obj) in __self._trusted or getattr(__obj, "__func__", None) is _BudgetEnvironment._strftime_now
        if not trusted and not isinstance(__obj, Macro):
            target = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
            owner = getattr(target, "__self__", None)
            if owner is not None and not _is_module(owner):
                if isinstance(owner, str) and getattr(target, "__name__", "") in ("format", "format_map"):
                    meter.check_format(owner, "{}")
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
                    raise TemplateBudgetError(f"{_MAX_INT_BITS:,} bits for a number")
            else:
                for seq, n in ((left, right), (right, left)):
                    if isinstance(n, int) and not isinstance(n, bool):
                        meter.check_estimate(seq, [n])
        elif op == "**" and ints and right > 0 and abs(left) > 1:
            if abs(left).bit_length() * right > _MAX_INT_BITS:
                raise TemplateBudgetError(f"{_MAX_INT_BITS:,} bits for a number")
        elif op == "%" and isinstance(left, str):
            meter.check_format(left, "%")
            meter.check_estimate(left, list(right) if isinstance(right, tuple) else [right])
        elif op == "+" and not ints:
            meter.check_need(meter.sizes.chars(left) + meter.sizes.chars(right))
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


def _instrument(ast: nodes.Template) -> nodes.Template:
    """Count every loop iteration and size-check every ``~`` concatenation before it
    is built."""
    for loop in ast.find_all(nodes.For):
        loop.iter = nodes.Filter(loop.iter, "_budget_iter", [], [], None, None, lineno=loop.lineno)

    def checked(concat: nodes.Concat) -> nodes.Filter:
        parts = nodes.List(concat.nodes, lineno=concat.lineno)
        return nodes.Filter(parts, "_budget_concat", [], [], None, None, lineno=concat.lineno)

    for parent in list(ast.find_all(nodes.Node)):
        for field in parent.fields:
            value = getattr(parent, field, None)
            if isinstance(value, nodes.Concat):
                setattr(parent, field, checked(value))
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, nodes.Concat):
                        value[i] = checked(item)
    return ast


# Compiled templates, kept for the next render: a model's template is compiled once,
# not once per message. Each entry is a pool, so two threads never share a meter.
_COMPILED_TEMPLATES = 8
_compiled: "OrderedDict[str, list[tuple[_BudgetEnvironment, Any]]]" = OrderedDict()
_compiled_lock = threading.Lock()


def _checkout(template: str) -> tuple[_BudgetEnvironment, Any]:
    with _compiled_lock:
        pool = _compiled.get(template)
        if pool:
            _compiled.move_to_end(template)
            return pool.pop()
    env = _BudgetEnvironment()
    return env, env.from_string(_instrument(env.parse(template)))


def _checkin(template: str, compiled: tuple[_BudgetEnvironment, Any]) -> None:
    compiled[0].meter = None
    with _compiled_lock:
        pool = _compiled.setdefault(template, [])
        _compiled.move_to_end(template)
        if len(pool) < 2:
            pool.append(compiled)
        while len(_compiled) > _COMPILED_TEMPLATES:
            _compiled.popitem(last=False)


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
    """The prompt text of ``messages`` by ``template`` (ChatML when None), in this
    process (:func:`.worker.render_bounded` renders it in the bounded helper).

    Raises a one-line SpecDeskError when the template fails, raises (e.g. roles that
    do not alternate), or goes over ``budget`` (:class:`TemplateBudgetError`)."""
    msgs = [dict(m) for m in messages]
    input_chars = sum(len(str(m.get("content", ""))) for m in msgs)
    meter = _Meter(budget, input_chars)
    source = template or CHATML
    compiled = None
    out: list[str] = []
    try:
        compiled = _checkout(source)
        env, tpl = compiled
        env.meter = meter
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
                raise meter.over()
            out.append(chunk)
            meter.step()
    except TemplateBudgetError:
        raise
    except TemplateError as e:
        raise SpecDeskError(f"the model's chat template failed: {_one_line(e)}") from None
    except RecursionError:
        raise SpecDeskError("the model's chat template failed: it recursed too deeply") from None
    except MemoryError:
        out.clear()
        raise TemplateMemoryError() from None
    except Exception as e:  # noqa: BLE001 - untrusted code: any error of it is the template's
        raise SpecDeskError(f"the model's chat template failed: {type(e).__name__}: {_one_line(e)}") from None
    finally:
        if compiled is not None:
            _checkin(source, compiled)
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
    "HINT",
    "TemplateBudgetError",
    "TemplateMemoryError",
    "drop_oldest_turn",
    "render_chat",
    "valid_roles",
]
