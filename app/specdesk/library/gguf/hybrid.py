"""What llama.cpp needs of a hybrid model's file before it can run it without aborting,
for the hybrid architectures SpecDesk accepts (:data:`CHECKED_HYBRIDS`): their
hyper-parameters and the exact set of tensors, with their shapes.

llama.cpp's loader throws (a clean error) for a missing required tensor, a wrong shape
or a tensor it does not use; it aborts the process, or divides by zero, on what its
graph asserts or computes from the hyper-parameters, and on tensors it loads as
optional but then uses. Taken from the vendored llama.cpp of llama-cpp-python 0.3.36:

* ``src/models/qwen35.cpp`` ``load_arch_hparams``: the ``ssm.*`` keys are required; the
  recurrent layers are ``attention.recurrent_layers`` or every layer but each
  ``full_attention_interval``-th (``(i + 1) % interval``: 0 divides by zero);
* ``load_arch_tensors``: a delta-net layer's ``attn_qkv`` and ``attn_gate`` are loaded as
  optional, and ``build_layer_attn_linear`` multiplies by them (a null tensor: a crash);
  every shape follows from ``head_k = head_v = ssm.state_size``, ``n_k_heads =
  ssm.group_count``, ``n_v_heads = ssm.time_step_rank``;
* the graphs: ``n_embd_head_v == n_embd_head_k`` (GGML_ASSERT), ``num_v_heads %
  num_k_heads == 0`` (GGML_ASSERT), ``d_inner / num_v_heads`` as the value head
  (``build_delta_net_*``: GGML_ASSERT(S_k == S_v)), ``ggml_rope_multi``'s sections
  (GGML_ASSERT: one of the first three positive, their sum at most the rotated dims);
* a trunk of one kind of layer only leaves one of the hybrid memory's two caches without
  a buffer: ``GGML_ASSERT(buffer)`` at the first decode (seen with a delta-net-only trunk);
* a file whose first block has no ``attn_norm`` but that declares NextN blocks is taken
  for "MTP heads only" and loads with no trunk (every trunk tensor optional), which
  its graph then dereferences.

Pure reading of the header: :func:`check_layout` is called by ``validate``'s checks.
"""

from __future__ import annotations

from typing import Callable

from ...errors import ModelFileError
from ...rules.rollback import RecurrentShape
from .header import GGUFFile, TensorInfo
from .rules import K
from .spec import GGML_MAX_DIMS, INTEGER_GGML_TYPES
from .text import show as _show

#: Hybrid (or recurrent) architectures whose files SpecDesk checks as llama.cpp needs them,
#: and so accepts as targets and drafts.
CHECKED_HYBRIDS = frozenset({"qwen35"})

Shape = tuple[int, ...]
Expected = dict[str, tuple[Shape, bool]]  # name -> (shape, required)


def _u(md: dict, key: str, default: int | None = None) -> int | None:
    v = md.get(key, default)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else default


def recurrent_layers(g: GGUFFile) -> list[bool] | None:
    """Which of the file's blocks are recurrent (qwen35's rule), or None if unreadable."""
    md, arch = g.metadata, g.architecture or ""
    n_all = _u(md, K.LLM.BLOCK_COUNT.format(arch=arch)) or 0
    nextn = _u(md, K.LLM.NEXTN_PREDICT_LAYERS.format(arch=arch), 0) or 0
    layers = md.get(f"{arch}.attention.recurrent_layers")
    if isinstance(layers, list):
        return [bool(x) for x in layers] if len(layers) == n_all else None
    every = _u(md, K.LLM.FULL_ATTENTION_INTERVAL.format(arch=arch), 4)
    if not every:
        return None
    return [i < n_all - nextn and (i + 1) % every != 0 for i in range(n_all)]


def recurrent_shape(g: GGUFFile) -> RecurrentShape | None:
    """The recurrent state's shape (rules.rollback prices it), None where the keys are missing."""
    md, arch = g.metadata, g.architecture or ""
    keys = [f"{arch}.ssm.{k}" for k in ("conv_kernel", "inner_size", "state_size", "group_count")]
    vals = [_u(md, k) for k in keys]
    layers = recurrent_layers(g)
    if any(v is None for v in vals) or layers is None:
        return None
    d_conv, d_inner, d_state, n_group = vals  # type: ignore[misc]
    return RecurrentShape(layers=sum(layers), d_conv=d_conv, d_inner=d_inner, d_state=d_state, n_group=n_group)


class _Qwen35:
    """The checks of one qwen35 file (``v``: validate's _Validator, after its generic checks)."""

    def __init__(self, v) -> None:
        self.v = v
        md, key = v.md, v.key
        self.fail: Callable[[str], ModelFileError] = v.fail
        ssm = {}
        for name in ("conv_kernel", "inner_size", "state_size", "time_step_rank", "group_count"):
            k = f"{v.arch}.ssm.{name}"
            v.require(k, "u32", f" (required for {v.arch})")
            ssm[name] = int(md[k])
        self.d_conv, self.d_inner, self.d_state = ssm["conv_kernel"], ssm["inner_size"], ssm["state_size"]
        self.n_v, self.n_k = ssm["time_step_rank"], ssm["group_count"]
        self.nextn = _u(md, key(K.LLM.NEXTN_PREDICT_LAYERS), 0) or 0
        self.n_trunk = v.n_layer - self.nextn

    def hparams(self) -> None:
        v = self.v
        if self.d_conv < 2 or self.d_state < 1 or self.n_v < 1 or self.n_k < 1:
            raise self.fail(f"{v.arch}.ssm: conv_kernel {self.d_conv}, state_size {self.d_state}, time_step_rank "
                            f"{self.n_v}, group_count {self.n_k}; llama.cpp needs a kernel of 2 or more and the rest positive")
        if self.n_v % self.n_k:
            raise self.fail(f"{v.arch}.ssm.group_count ({self.n_k}) does not divide time_step_rank ({self.n_v})")
        if self.d_inner != self.d_state * self.n_v:
            raise self.fail(f"{v.arch}.ssm.inner_size is {self.d_inner}; llama.cpp needs state_size x time_step_rank "
                            f"({self.d_state * self.n_v})")
        if self.n_trunk < 1:
            raise self.fail(f"{v.arch} has no trunk: all {v.n_layer} blocks are NextN blocks")
        every = v.md.get(v.key(K.LLM.FULL_ATTENTION_INTERVAL))
        if every is not None:
            v.check_type(v.key(K.LLM.FULL_ATTENTION_INTERVAL), "u32")
            if int(every) < 1:
                raise self.fail(f"{v.key(K.LLM.FULL_ATTENTION_INTERVAL)} is 0 (llama.cpp divides by it)")
        recr = recurrent_layers(v.g)
        if recr is None:
            raise self.fail(f"{v.arch}.attention.recurrent_layers does not have one value per block ({v.n_layer})")
        if all(recr[: self.n_trunk]) or not any(recr[: self.n_trunk]):
            # llama.cpp then allocates no buffer for one of its two caches and aborts at the first decode
            raise self.fail(f"{v.arch} needs both kinds of layer in its trunk, recurrent and full attention; "
                            f"this one has {'no full-attention' if all(recr[: self.n_trunk]) else 'no recurrent'} layer")
        if v.head_k != v.head_v:
            raise self.fail(f"attention key length {v.head_k} differs from value length {v.head_v}; {v.arch} needs them equal")
        if v.n_rot < 2 or v.n_rot > v.head_k or v.n_rot % 2:
            raise self.fail(f"{v.key(K.Rope.DIMENSION_COUNT)} is {v.n_rot}; {v.arch} needs an even count up to the head size ({v.head_k})")
        self.sections()

    def sections(self) -> None:
        v = self.v
        key = v.key(K.Rope.DIMENSION_SECTIONS)
        sec = v.require(key, "ints", f" (required for {v.arch})")
        vals = [int(x) for x in sec]  # type: ignore[union-attr]
        if len(vals) > 4:
            raise self.fail(f"{key} has {len(vals)} values; llama.cpp reads at most 4")
        vals += [0] * (4 - len(vals))
        if any(x < 0 for x in vals) or not any(vals[:3]) or sum(vals) > v.n_rot:
            raise self.fail(f"{key} is {vals}; llama.cpp needs values of 0 or more, one of the first three positive, "
                            f"summing to at most the rotated dimensions ({v.n_rot})")

    def expected(self) -> Expected:
        v = self.v
        E, V = v.n_embd, v.n_vocab or 0
        hd, key_dim, value_dim = v.head_k, self.d_state * self.n_k, self.d_state * self.n_v
        recr = recurrent_layers(v.g) or []
        exp: Expected = {"token_embd.weight": ((E, V), True), "output_norm.weight": ((E,), True),
                         "output.weight": ((E, V), False)}
        for i in range(v.n_layer):
            p, nh, nkv, nff = f"blk.{i}.", v.n_head[i], v.n_head_kv[i], v.n_ff[i]
            mtp = i >= self.n_trunk
            if nff < 1 or (not recr[i] and (nh < 1 or nkv < 1)):
                raise self.fail(f"layer {i} has no feed-forward size or no attention heads")
            if mtp and recr[i]:
                raise self.fail(f"layer {i} is a NextN block, which llama.cpp runs as attention, but is marked recurrent")
            need = True  # a NextN block's too: llama.cpp skips them without its heads, but they must be there
            rows: list[tuple[str, Shape]] = [("attn_norm.weight", (E,)), ("post_attention_norm.weight", (E,)),
                                            ("ffn_gate.weight", (E, nff)), ("ffn_up.weight", (E, nff)),
                                            ("ffn_down.weight", (nff, E))]
            if recr[i]:
                rows += [("attn_qkv.weight", (E, 2 * key_dim + value_dim)), ("attn_gate.weight", (E, value_dim)),
                         ("ssm_conv1d.weight", (self.d_conv, 2 * key_dim + value_dim)), ("ssm_dt.bias", (self.n_v,)),
                         ("ssm_a", (self.n_v,)), ("ssm_beta.weight", (E, self.n_v)), ("ssm_alpha.weight", (E, self.n_v)),
                         ("ssm_norm.weight", (self.d_state,)), ("ssm_out.weight", (value_dim, E))]
            else:
                rows += [("attn_output.weight", (hd * nh, E)), ("attn_q_norm.weight", (hd,)), ("attn_k_norm.weight", (hd,))]
            for name, shape in rows:
                exp[p + name] = (shape, need)
            if mtp:
                for name, shape, req in (("nextn.eh_proj.weight", (2 * E, E), True), ("nextn.enorm.weight", (E,), True),
                                         ("nextn.hnorm.weight", (E,), True), ("nextn.embed_tokens.weight", (E, V), False),
                                         ("nextn.shared_head_head.weight", (E, V), False),
                                         ("nextn.shared_head_norm.weight", (E,), False)):
                    exp[p + name] = (shape, req)
        return exp

    def attention_qkv(self, names: dict[str, TensorInfo], exp: Expected) -> None:
        """An attention block's projections: q (with its gate), k and v, or one fused attn_qkv."""
        v = self.v
        recr = recurrent_layers(v.g) or []
        for i in range(v.n_layer):
            if recr[i]:
                continue
            p, hd, nh, nkv = f"blk.{i}.", v.head_k, v.n_head[i], v.n_head_kv[i]
            need = True
            q, k = hd * nh * 2, hd * nkv
            if p + "attn_qkv.weight" in names:
                exp[p + "attn_qkv.weight"] = ((v.n_embd, q + 2 * k), need)
                exp[p + "attn_qkv.bias"] = ((q + 2 * k,), False)
            else:
                for part, n in (("q", q), ("k", k), ("v", k)):
                    exp[p + f"attn_{part}.weight"] = ((v.n_embd, n), need)
            for part, n in (("q", q), ("k", k), ("v", k)):
                exp[p + f"attn_{part}.bias"] = ((n,), False)


def _pad(shape: Shape) -> Shape:
    return tuple(shape) + (1,) * (GGML_MAX_DIMS - len(shape))


def check_layout(v, names: dict[str, TensorInfo]) -> None:
    """The hyper-parameters and tensors of a file of a :data:`CHECKED_HYBRIDS`
    architecture, as llama.cpp needs them (raises ModelFileError in one line)."""
    if v.arch != "qwen35":
        return
    q = _Qwen35(v)
    q.hparams()
    # a file that declares heads with no 'blk.0.attn_norm' (heads alone) is refused before: validate.py
    exp = q.expected()
    q.attention_qkv(names, exp)
    for name, (shape, required) in exp.items():
        t = names.get(name)
        if t is None:
            if required:
                raise v.fail(f"missing tensor '{name}' (required by the {v.arch} architecture)")
            continue
        if _pad(t.shape) != _pad(shape):
            raise v.fail(f"tensor '{name}' has shape {list(t.shape)}; {v.arch} needs {list(shape)}")
        if t.ggml_type in INTEGER_GGML_TYPES:
            raise v.fail(f"tensor '{name}' has type {t.type_name}, which is not a weight type")
    for name in names:
        if name not in exp:
            raise v.fail(f"unexpected tensor '{_show(name)}' for the {v.arch} architecture (llama.cpp rejects unused tensors)")
