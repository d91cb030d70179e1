"""The batch shapes a context is warmed with before anything is timed.

On a GPU a context's first decode costs far more than the next ones (cuBLAS handles,
kernels loaded on their first launch, a CUDA graph captured), and so does the first
decode of each batch shape (its graph built and allocated). llama.cpp pays that in one
decode before it times anything (``common_init_from_params``: a batch of BOS and EOS,
then the memory cleared; ``--no-warmup`` skips it). The loop here uses more shapes than
llama.cpp's one: a prompt's batch, a target step, a verify batch per draft length, the
draft model's single decodes and its catch-ups. A one-off paid inside the loop is taken
for what drafting costs (the draft's prompt prefill became auto's price of a catch-up,
and it never drafted again), so every shape the loop will use first is decoded once
beforehand, and nothing learns from those decodes.

A shape is ``(tokens, rows of logits asked for)``, as llama.cpp keys its graphs. On a
CPU a first call costs little beyond the pages of the weights it reads, so a few
decodes do (the verify batch of auto's first, short draft); on a device the verify
batches span its kernels' size classes (up to auto's longest draft).
"""

from __future__ import annotations

#: Tokens in the prompt-like batch: over 8, so that a GPU runs its batched kernels
#: (llama.cpp's CUDA build uses its vector kernels up to 8 tokens).
PROMPT_BATCH = 16
#: Verify batches warmed for ``auto`` on a device: every size up to 9 (llama.cpp's CUDA
#: build has a vector kernel per batch size up to 8, its batched kernels beyond), then
#: one per 8 tokens up to auto's longest draft (32) + 1.
DEVICE_VERIFY = (2, 3, 4, 5, 6, 7, 8, 9, 17, 25, 33)
#: ... and on a CPU: the batch of auto's first draft (2 tokens) + 1.
CPU_VERIFY = (3,)

Shape = tuple[int, int]


def verify_sizes(k: int | str | None, device: bool) -> tuple[int, ...]:
    """The verify batches a loop drafting ``k`` (an int, "auto", or None for nothing)
    will use first."""
    if k is None:
        return ()
    if k == "auto":
        return DEVICE_VERIFY if device else CPU_VERIFY
    return (int(k) + 1,)


def target_shapes(k: int | str | None, device: bool) -> list[Shape]:
    """A prompt's batch (no rows: the prompt's last token is evaluated in the first
    step), a target step, and the verify batches."""
    return [(PROMPT_BATCH, 0), (1, 1)] + [(b, b) for b in verify_sizes(k, device)]


def draft_shapes() -> list[Shape]:
    """A draft model's prompt batch, its catch-up of the two tokens a verify adds
    (with the last row), and its single decodes while it drafts."""
    return [(PROMPT_BATCH, 0), (2, 1), (1, 1)]
