"""Chat prompts from the GGUF's own chat template, rendered in a sandbox.

A chat template is Jinja code that came with an untrusted file, so it runs in
Jinja's ImmutableSandboxedEnvironment (no attribute access to Python internals,
no mutation of the inputs), with the few helpers templates expect.
"""

from __future__ import annotations

import datetime
from typing import Sequence

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import SpecDeskError

# Used when a GGUF carries no template: ChatML, what most small instruct models use.
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _raise(msg: str):
    raise TemplateError(msg)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def render_chat(
    template: str | None,
    messages: Sequence[dict],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    try:
        tpl = env.from_string(template or CHATML)
        return tpl.render(
            messages=[dict(m) for m in messages],
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
            tools=None,
        )
    except TemplateError as e:
        raise SpecDeskError(f"the model's chat template failed: {e}") from None
