"""Session: a loaded target (and draft) with what auto learnt about them, leased to
whoever uses the contexts, and Generation: one finished answer (see the package's
docstring for an example)."""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np
import psutil

from ..chat.worker import render_bounded, shared_renderer
from ..engine.context import Context
from ..engine.devices import handles
from ..system.memory import MemoryReport, ModelMemory, gpu_memory, report
from ..engine.model import Model, amx_compiled, repack_types
from ..rules.vocab import Compatibility, check_compatible
from ..errors import ContextOverflowError, IncompatibleDraftError, SpecDeskError
from ..fmt import format_bytes
from ..library.gguf import estimate_memory, validate_gguf
from ..library.gguf.heads import head_problem
from ..library.gguf.estimate import repacked_tensors
from ..library.gguf.split import first_part, model_size, split_count
from ..speculative.controller import Controller, FixedK
from ..speculative.auto import AutoK
from ..speculative.costmodel import CostModel
from ..speculative.decoder import Step, speculate
from ..speculative.proposers import HistoryProposer, Proposer, registry
from ..speculative.proposers.registry import DRAFT_MODEL, Need
from ..speculative.stats import Stats
from . import costcache, remote, rollback, warmup
from .offload import Offload, resolve_offload
from .config import GenerationConfig, ModelSpec, translated_refusal
from .source_table import head_file, load_options, own_sources
from .sources import DraftModel, DraftSource, HeadFile, Missing
from .text import head_as_target_text, instead_text, source_missing_text

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How much of a prompt's end is kept with its answer in the history index.
HISTORY_PROMPT_TAIL = 64
#: Served clients whose history lookups are kept apart (the least recent is dropped).
OWNERS_KEPT = 16


class ModelsUnloaded(SpecDeskError):
    """The models were unloaded (the session closed) before this use of them began."""


LoadProgress = Callable[[str, float], bool]  # (message, 0..1) -> keep going


def check_model_file(path: Path) -> Path:
    """Validate a GGUF before it reaches llama.cpp (raises ModelFileError) and return
    the file llama.cpp must be given: ``path`` itself, or for a split model named by
    any of its parts, its first part (every part checked, a missing or mismatched one
    named in one line)."""
    g = validate_gguf(path)
    # named from the path given (not the memoised header's, which may be another
    # spelling of the same file): llama.cpp finds the other parts beside this one
    return first_part(Path(path)) if split_count(g) > 1 else Path(path)


#: llama.cpp holds a context size in 32 bits: beyond, a size wraps to another one.
MAX_CTX = 2**31 - 1


def check_context_memory(spec: ModelSpec) -> None:
    """Refuse, before llama.cpp tries, a context whose KV cache and compute buffers alone
    exceed all of this machine's memory (RAM, swap and, where layers are offloaded,
    VRAM): a context of a billion tokens took 20 GB and 80 s to fail, and past 2^32 one
    wrapped to another size. The weights are left out (mapped, they page), and so is
    what is in use: a borderline size is llama.cpp's to try."""
    if spec.n_ctx > MAX_CTX:
        raise ContextOverflowError(f"a context of {spec.n_ctx} tokens is more than llama.cpp takes ({MAX_CTX})")
    if spec.rpc:  # other machines hold what goes to their devices
        return
    est = estimate_memory(validate_gguf(spec.path), n_ctx=spec.n_ctx, n_gpu_layers=max(0, spec.n_gpu_layers))
    need = int(est["kv_bytes"]) + int(est["compute_bytes"]) + int(est.get("state_bytes", 0))
    have = psutil.virtual_memory().total + psutil.swap_memory().total
    if spec.n_gpu_layers:
        have += sum(g.total_bytes for g in gpu_memory()[0])
    if need > have:
        raise ContextOverflowError(
            f"{spec.path.name}: a context of {spec.n_ctx} tokens needs about {format_bytes(need)} for its KV cache "
            f"and buffers, more than this machine's {format_bytes(have)} of memory: lower the context size")


class LoadedModel:
    def __init__(self, role: str, spec: ModelSpec, model: Model, ctx: Context, where: str = "") -> None:
        self.role = role
        self.spec = spec
        self.model = model
        self.ctx = ctx
        #: where its layers are, in words, on a build that offloads ("" on a CPU-only one)
        self.where = where

    @property
    def name(self) -> str:
        return self.spec.path.name

    def memory(self) -> ModelMemory:
        """From the buffers llama.cpp reported allocating (the formula where it did not)."""
        mb, cb = self.model.buffers, self.ctx.buffers
        repack = sum(b.bytes for b in mb if b.kind == "model" and b.device == "CPU_REPACK")
        kv = sum(b.bytes for b in cb if b.kind == "KV") or int(self.model.kv_bytes_per_token() * self.ctx.n_ctx)
        compute = sum(b.bytes for b in cb if b.kind in ("compute", "output"))
        vram = sum(b.bytes for b in mb + cb if b.on_gpu)
        remote_b = sum(b.bytes for b in mb + cb if b.remote)
        rb = getattr(self.ctx, "rollback_costs", None)  # (a head's context has none of its own)
        return ModelMemory(
            role=self.role,
            path=str(self.spec.path),
            weights_bytes=int(self.model.shape.size_bytes),
            kv_bytes=int(kv),
            n_ctx=self.ctx.n_ctx,
            n_gpu_layers=self.spec.n_gpu_layers,
            repack_bytes=int(repack),
            compute_bytes=int(compute),
            vram_bytes=int(vram),
            remote_bytes=int(remote_b),
            where=self.where,
            state_bytes=sum(b.bytes for b in cb if b.kind == "RS") + (rb.held_bytes if rb else 0),
            snapshot_bytes=rb.snapshot_bytes if rb else 0,
        )

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


def _load_one(role: str, spec: ModelSpec, progress: LoadProgress | None, lo: float, hi: float,
              placement: remote.Placement | None = None, where: str = "", options: dict | None = None,
              context: Callable | None = None) -> LoadedModel:
    """Load one model (``options``: what its own draft sources need of the load;
    ``context(model)``: its context, where it is not a plain one: a head's)."""
    spec = replace(spec, path=check_model_file(spec.path))  # a split model loads from its first part
    cb = None
    if progress is not None:
        name = spec.path.name

        def cb(p: float) -> bool:
            return progress(f"loading {role} {name}", lo + (hi - lo) * p)

    if placement is None:
        placement = remote.local_placement()  # once servers are registered, a model without any stays local
        if placement is not None:
            placement = replace(placement, n_gpu_layers=spec.n_gpu_layers)
    ngl = spec.n_gpu_layers if placement is None else placement.n_gpu_layers
    repack = weights_to_repack(spec.path, ngl)
    if placement is None:
        model = Model(spec.path, n_gpu_layers=ngl, progress=cb, repack=repack, **(options or {}))
    else:
        model = Model(spec.path, n_gpu_layers=ngl, progress=cb, devices=None if placement.device_names is None else handles(placement.device_names),
                      tensor_split=list(placement.tensor_split or ()) or None, rpc_endpoints=placement.rpc_endpoints,
                      repack=repack, **(options or {}))
    try:
        ctx = (Context(model, n_ctx=spec.n_ctx, threads=spec.threads, **rollback.context_options(spec.path, role))
               if context is None else context(model))
    except BaseException:
        model.close()
        raise
    return LoadedModel(role, spec, model, ctx, where)


def check_head(target: Path, draft: Path | None) -> HeadFile | None:
    """What the draft file is where it is a head of another model (an EAGLE-3 or DFlash
    head, a Gemma 4 assistant: session/source_table.py), its fit to the target checked
    from the two files before llama.cpp sees either (one line, IncompatibleDraftError);
    None for a draft model. A head as the target is refused."""
    if head_file(target) is not None:
        raise IncompatibleDraftError(head_as_target_text(target.name, head_file(target).what))
    head = head_file(draft) if draft is not None else None
    if head is not None:
        why = head_problem(validate_gguf(target), validate_gguf(draft))
        if why:
            raise IncompatibleDraftError(why)
    return head


def weights_to_repack(path: Path, n_gpu_layers: int) -> list[str]:
    """The weights to name for llama.cpp's CPU_REPACK buffer: only where this build's
    extra buffers are off (an AMX build, :func:`specdesk.engine.model.amx_compiled`);
    elsewhere llama.cpp picks them itself."""
    if not amx_compiled():
        return []
    return repacked_tensors(validate_gguf(path), repack_types(), n_gpu_layers)


def plan_target(spec: ModelSpec) -> remote.Placement | None:
    """Where the target's layers go: across the RPC servers the spec names (and local
    devices), each server checked and registered once; None leaves it to llama.cpp."""
    if spec.rpc or spec.tensor_split:
        # auto (None) is today's behaviour there: all layers to the servers' devices
        return remote.prepare_placement(spec.path, spec.n_gpu_layers or 0, spec.rpc, spec.tensor_split)
    return None


class Session:
    """A loaded target (and optionally a draft) with what has been learnt about them."""

    def __init__(self, target: LoadedModel, draft: LoadedModel | None = None, compat: Compatibility | None = None,
                 sources: Sequence[DraftSource] = ()) -> None:
        self.target = target
        self.draft = draft  # the draft file, loaded (a draft model, or a head)
        self.compat = compat
        # what the proposers draft with, by need (session/sources.py): the draft file's
        # source (a draft model, or a head's among ``sources``), the target's own MTP
        # heads, ...; a need without one is Missing
        self.sources: dict[Need, DraftSource] = {}
        if draft is not None and not any(src.need.in_draft_file for src in sources):  # (a head is the file's source)
            self.sources[DRAFT_MODEL] = DraftModel(DRAFT_MODEL, draft, target, compat)
        for src in sources:
            self.sources[src.need] = src
        self._in_use: Need | None = None  # the need the last generation drafted with
        # Earlier turns of this session, for history lookups (bounded by tokens kept).
        self.history = HistoryProposer()
        # One auto controller per session: its measured costs and acceptance carry over
        # from one generation to the next, and its costs to the next session on this
        # pair (see costcache).
        self.auto = AutoK()
        self._costs_key: str | None = None
        self._costs_file: Path | None = None
        # Users of the contexts (a generation, a comparison, a calibration): close()
        # waits for the last one to end, so llama.cpp's memory is never freed under
        # a worker that is still inside llama_decode.
        self._lock = threading.Lock()
        self._users = 0
        self._close_pending = False
        self.closed = False
        # Whose tokens the contexts hold (generate's ``owner``; None: this process's
        # own user) and what they held when that owner's last generation ended; each
        # served client's earlier turns, for its own history lookups.
        self._kv_owner: str | None = None
        self._kv_left: tuple | None = None
        self._histories: OrderedDict[str, HistoryProposer] = OrderedDict()
        # Warm each context a generation runs before anything is timed (see
        # session.warmup; False: --no-warmup), and the (context, shape) pairs warmed.
        self.warmup = True
        self.warmed: set[tuple[str, tuple]] = set()

    @contextlib.contextmanager
    def lease(self) -> Iterator["Session"]:
        """Use the models for a while; a close() meanwhile takes effect when the last
        lease ends (on that thread). Using a closed session raises ModelsUnloaded."""
        with self._lock:
            if self.closed or self._close_pending:
                raise ModelsUnloaded("the models were unloaded; load them again")
            self._users += 1
        try:
            yield self
        finally:
            with self._lock:
                self._users -= 1
                close_now = self._close_pending and self._users == 0
            if close_now:
                self._free()

    def remember_costs(self, path: Path | None = None) -> None:
        """Seed ``auto`` with the costs measured last time on this pair and setup, and
        save what it measures when the session closes."""
        t, d = self.target.spec, self.draft.spec if self.draft is not None else None
        if t.rpc:
            return  # over a network the costs change with it: auto measures them afresh
        # the thread counts llama.cpp runs with, not as asked: "--threads 2" and the
        # default on a 2-core machine are one setup (the CLI and the app share the cache)
        dt = self.draft.ctx.threads if self.draft is not None else None
        try:
            self._costs_key = costcache.pair_key(
                t.path, self.target.ctx.threads, t.n_gpu_layers, d.path if d else None, dt, d.n_gpu_layers if d else 0
            )
        except OSError:
            return
        self._costs_file = path
        state = costcache.load(self._costs_key, path)
        if state:
            self.auto.restore_costs(state)
            log.info("auto starts from the costs measured last time on this pair")

    def seed_costs(self, costs: CostModel) -> None:
        """Start ``auto`` from these measured costs (a calibration's): a copy, so the
        calibration keeps its own, and a reseed, so auto looks again at every source
        the old costs had stopped."""
        self.auto.costs = copy.deepcopy(costs)
        self.auto.reseeded()

    def save_costs(self) -> None:
        if self._costs_key is None or self.auto.costs.step_cost is None:
            return
        costcache.save(self._costs_key, self.auto.saved_costs(), self._costs_file)

    # -- loading ----------------------------------------------------------------

    @classmethod
    def load(
        cls,
        target: ModelSpec,
        draft: ModelSpec | None = None,
        progress: LoadProgress | None = None,
        remember_costs: bool = True,
        translate: bool = False,
        placement: remote.Placement | None = None,
        offload: Offload | None = None,
    ) -> "Session":
        """Load the target (and the draft, checked for compatibility). With
        ``remember_costs``, ``auto`` starts from the costs measured on this pair
        last time and saves its own when the session closes. With ``translate``, a
        draft with another vocabulary drafts text that is re-tokenized for the target
        (``translated``) instead of being refused. ``placement`` is the target's plan
        (:func:`plan_target`, e.g. from the preflight); without one it is planned here.
        ``offload`` is where auto layers go (:func:`~specdesk.session.offload.resolve_offload`,
        e.g. from the preflight or the CLI's note); without one it is fitted here."""
        shared_renderer().start()  # the chat template's helper process starts while the models load
        target = replace(target, path=check_model_file(target.path))
        if draft is not None:
            draft = replace(draft, path=check_model_file(draft.path))
        head = check_head(target.path, draft.path if draft is not None else None)
        if placement is None:
            placement = plan_target(target)
        if offload is None:
            offload = resolve_offload(target, draft, placement)
        target, draft = offload.apply(target, draft)  # no auto count past this line
        wheres = [w.place() if offload.offloads else "" for w in offload.roles] + [""]
        for spec in (target, draft):
            if spec is not None:
                check_context_memory(spec)
        sizes = [model_size(target.path), model_size(draft.path) if draft else 0]
        split = sizes[0] / max(1, sum(sizes))
        own = own_sources(target.path)
        t = _load_one("target", target, progress, 0.0, split if draft else 1.0, placement, wheres[0], load_options(own))
        sources = [src.attach(t) for src in own]
        try:
            d = None
            compat = None
            if draft is not None:
                make = None if head is None else (lambda model: head.context(model, t))
                d = _load_one("draft", draft, progress, split, 1.0, where=wheres[1], context=make)
                compat = check_compatible(t.model.vocab_info(), d.model.vocab_info())
                if not compat and (head is not None or not translate):
                    d.close()
                    raise IncompatibleDraftError(
                        f"draft {draft.path.name} is incompatible with target {target.path.name}: {compat.reason}"
                    )
                if head is not None:
                    sources.append(head.source(d, t))
        except BaseException:
            t.close()
            raise
        session = cls(t, d, compat, sources)
        if remember_costs:
            session.remember_costs()
        return session

    def close(self) -> None:
        """Free both models now, or, while a lease is held, as soon as the last one ends."""
        with self._lock:
            if self.closed or self._close_pending:
                return
            if self._users:
                self._close_pending = True
                return
            self._close_pending = True
        self._free()

    def _free(self) -> None:
        try:
            self.save_costs()
        except Exception as e:  # noqa: BLE001 - a cache that cannot be written must not keep the models loaded
            log.warning("could not save the auto costs: %s", e)
        finally:
            self._costs_key = None
            try:
                for src in self.sources.values():
                    src.close()
                self.sources.clear()
                self.draft = None
            finally:
                if self.target is not None:
                    self.target.close()
                self.closed = True

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- prompts ----------------------------------------------------------------

    def chat_prompt(self, messages: Sequence[dict], cancel: Callable[[], bool] | None = None) -> list[int]:
        """Tokens of a chat, formatted with the target's own chat template. The
        template is rendered in the bounded helper process (chat.worker): one
        that needs too much memory or time is stopped with a one-line
        SpecDeskError; Cancelled when ``cancel()`` turns true during the render."""
        m = self.target.model
        vi = m.vocab_info()
        text = render_bounded(
            m.chat_template(),
            messages,
            bos_token=m.token_text(vi.bos) if vi.bos >= 0 else "",
            eos_token=m.token_text(vi.eos) if vi.eos >= 0 else "",
            cancel=cancel,
        )
        return self.raw_prompt(text)

    def raw_prompt(self, text: str, parse_special: bool = True) -> list[int]:
        """Tokens of a plain prompt. As llama.cpp's tools (llama-server, llama-cli)
        do, special tokens written in the text (``<|im_start|>``) become those tokens,
        so a hand-written chat prompt tokenizes as the chat template's would; with
        ``parse_special=False`` the text is only text (``<``, ``|``, ``im``, ...)."""
        vi = self.target.model.vocab_info()
        toks = self.target.model.tokenize(text, add_special=True, parse_special=parse_special)
        if parse_special and len(toks) >= 2 and vi.bos >= 0 and toks[0] == toks[1] == vi.bos:
            toks = toks[1:]  # the text already began with BOS
        return toks

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.target.model.detokenize(list(tokens))

    # -- generation ---------------------------------------------------------------

    def check_fits(self, prompt: Sequence[int], max_tokens: int) -> None:
        n_ctx = self.target.ctx.n_ctx
        asked = self.target.spec.n_ctx
        # llama.cpp pads a context to a multiple of 256 tokens: the size in a message
        # is the one that holds, and says so where it is not the one asked for
        why = f" (llama.cpp rounds the {asked} asked for up to a multiple of 256)" if asked != n_ctx else ""
        if len(prompt) >= n_ctx:
            raise ContextOverflowError(f"the prompt is {len(prompt)} tokens but the context holds {n_ctx}{why}; "
                                       "raise --ctx or shorten it")
        if len(prompt) + max_tokens > n_ctx:
            raise ContextOverflowError(
                f"max tokens {max_tokens} runs past the context: prompt {len(prompt)} + {max_tokens} > {n_ctx}{why}; "
                f"lower max tokens to {n_ctx - len(prompt)} or raise the context size"
            )

    def auto_estimate(self):
        """auto's current estimate (why it drafts or not), read as one object: the worker
        replaces it whole at each step; None before its first."""
        return self.auto.estimate

    def estimated_reference(self) -> float | None:
        """Target alone's speed (tokens/s) as this session's single target steps time it
        (what every verify of one token costs); None before it has timed one."""
        step = self.auto.costs.reference_step
        return 1.0 / step if step else None

    def make_controller(self, config: GenerationConfig) -> Controller:
        """The session's own auto controller (what it learnt carries over to the next
        answer, and through the cost cache to the next session on this pair, in the CLI
        and the app alike), or a fixed k, which teaches auto nothing: auto learns from
        its own steps."""
        return self.auto if config.k == "auto" else FixedK(int(config.k))

    @property
    def translated(self) -> bool:
        """The draft speaks another vocabulary: its text is re-tokenized for the target."""
        return self.draft is not None and self.compat is not None and not self.compat

    def proposer_name(self, config: GenerationConfig) -> str:
        """The proposer that runs ``config`` on this pair: ``draft`` is ``translated``
        on a pair of two vocabularies; ``translated`` on a pair of one is refused."""
        try:
            return registry.resolve(config.proposer, self.translated)
        except registry.PairMismatch:
            raise SpecDeskError(translated_refusal(config.proposer)) from None

    def source(self, need: Need) -> DraftSource:
        """The session's source for ``need`` (a Missing one where it has none)."""
        return self.sources.get(need) or Missing(need)

    def refusal(self, config: GenerationConfig) -> str | None:
        """Why ``config`` cannot run on this session, in one line; None when it can."""
        try:
            kind = registry.kind(self.proposer_name(config))
        except SpecDeskError as e:
            return str(e)
        if kind.needs is None:
            return None
        src = self.sources.get(kind.needs)
        if src is None:
            # what this session can draft with instead (the draft file's head, say), then what needs nothing
            loaded = [k.name for k in registry.KINDS if k.substitute and k.needs in self.sources
                      and self.sources[k.needs].refusal() is None]
            return source_missing_text(config.proposer, kind.needs.name, kind.needs.in_draft_file,
                                       loaded + list(registry.WITHOUT_DRAFT))
        return src.refusal()

    def runnable(self, config: GenerationConfig, history: HistoryProposer | None = None) -> tuple[Proposer | None, str | None]:
        """Whether ``config`` can run on this session: (its proposer, None), or (None, why
        not, in one line). The one answer every front end asks for; the proposer's
        history lookups read ``history`` (the session's own by default)."""
        why = self.refusal(config)
        if why is not None:
            return None, why
        kind = registry.kind(self.proposer_name(config))
        parts = registry.Parts(sources=lambda need: self.source(need).proposer(config),
                               history=self.history if history is None else history)
        return kind.build(parts), None

    def choose(self, config: GenerationConfig) -> tuple[GenerationConfig, str]:
        """What an answer runs when a chat asks for ``config``, and why it is not that
        ("" when it is): a kind whose source this session lacks runs the first kind that
        drafts with a source it has (the target's MTP heads where no draft model is
        loaded), else the registry's fallback, and says so."""
        if self.refusal(config) is None:
            return config, ""
        need = registry.kind(config.proposer).needs
        for k in registry.KINDS:
            other = replace(config, proposer=k.name)
            if k.substitute and k.name != config.proposer and self.refusal(other) is None:
                return other, instead_text(config.proposer, k.name, need.name if need else "")
        other = replace(config, proposer=registry.FALLBACK)
        return other, instead_text(config.proposer, registry.FALLBACK, need.name if need else "")

    def drafting_need(self) -> Need | None:
        """The source a calibration measures: the draft file's, else one of the target's
        own that can draft (its MTP heads); None when nothing can draft."""
        needs = sorted(self.sources, key=lambda n: not n.in_draft_file)
        return next((n for n in needs if self.sources[n].refusal() is None), None)

    def runnable_configs(self, configs: Sequence[T]) -> list[T]:
        """Those of ``configs`` (anything with a ``proposer`` name: a GenerationConfig, a
        bench configuration) that can run on this session."""
        return [c for c in configs if self.refusal(GenerationConfig(proposer=c.proposer)) is None]

    def cannot_run(self) -> dict[str, str]:
        """The choices this session cannot run whatever draft file is loaded (those that
        draft with the target's own heads it cannot draft with), each with why."""
        out = {}
        for name in registry.CHOICES:
            need = registry.kind(name).needs
            if need is not None and not need.in_draft_file:
                why = self.refusal(GenerationConfig(proposer=name))
                if why:
                    out[name] = why
        return out

    def make_proposer(self, config: GenerationConfig, history: HistoryProposer | None = None) -> Proposer:
        """The proposer for ``config``, with its source switched on for a generation
        (SpecDeskError with the reason where it cannot run here)."""
        proposer, why = self.runnable(config, history)
        if proposer is None:
            raise SpecDeskError(why)
        self._use(registry.kind(self.proposer_name(config)).needs)
        return proposer

    def _use(self, need: Need | None) -> None:
        """Switch on the source a generation drafts with, and off the others."""
        for n, src in self.sources.items():
            if n != need:
                src.idle()
        if need is not None:
            self.sources[need].use()
        self._in_use = need

    def generate(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        cancel: Callable[[], bool] | None = None,
        owner: str | None = None,
    ) -> Iterator[Step]:
        """Stream the generation: one Step per propose/verify pass. The session is
        leased first, for the whole generation, so a close() waits for it to end, and
        one that came before raises ModelsUnloaded before the models are touched (the
        proposer reads the draft's context).

        ``owner`` names a served client (the server gives its address). Its prompt
        reuses the tokens the contexts hold only when they are what its own last
        generation left, and its history lookups see only its own turns: no client can
        learn how much of another's prompt it guessed from ``cached_tokens``, from the
        time its prompt took, or from which history drafts were accepted. None (the CLI,
        the app's own chat) reuses whatever the contexts hold."""
        with self.lease():
            self.check_fits(prompt, config.max_tokens)
            history = self._history(owner)
            proposer = self.make_proposer(config, history)
            controller = self.make_controller(config)
            if owner is not None and not (owner == self._kv_owner and self._kv_left == self._contexts_now()):
                self.reset()  # another's tokens (or some left by a generation cut short): start afresh
            if self.warmup:
                warmup.warm(self, config)  # what this configuration runs, once: nothing timed pays a first call
            self._kv_owner, self._kv_left = owner, None  # what it leaves is recorded only when it ends
            rng = np.random.default_rng(config.seed)
            answer: list[int] = []
            for step in speculate(
                self.target.ctx,
                proposer,
                controller,
                list(prompt),
                params=config.sampling,
                max_tokens=config.max_tokens,
                rng=rng,
                cancel=cancel,
            ):
                answer.extend(t.token for t in step.tokens)
                yield step
            if owner is not None:  # None's tokens are reused by none but None
                self._kv_left = self._contexts_now()
        # later turns (and hybrid lookups) can copy from this one; the prompt's tail
        # lets the next question's answer match the start of this answer
        history.remember(list(prompt[-HISTORY_PROMPT_TAIL:]) + answer)

    def _history(self, owner: str | None) -> HistoryProposer:
        """The earlier turns ``owner``'s lookups may copy from: the session's own for
        None, else that client's alone (kept for the OWNERS_KEPT most recent clients)."""
        if owner is None:
            return self.history
        h = self._histories.pop(owner, None)
        self._histories[owner] = h = h if h is not None else HistoryProposer()
        while len(self._histories) > OWNERS_KEPT:
            self._histories.popitem(last=False)
        return h

    def _contexts_now(self) -> tuple:
        """The tokens the contexts hold (the target's, then each source's)."""
        return (tuple(self.target.ctx.history),) + tuple(src.holds() for src in self.sources.values())

    def run(self, prompt: Sequence[int], config: GenerationConfig,
            cancel: Callable[[], bool] | None = None) -> "Generation":
        steps = list(self.generate(prompt, config, cancel))
        return Generation(steps=steps, config=config, prompt=list(prompt))

    def reset(self) -> None:
        """Empty both contexts, so the next run evaluates its whole prompt (fair timing,
        exact replays)."""
        self.target.ctx.rollback(0)
        for src in self.sources.values():
            src.reset()

    def warm_up(self, config: GenerationConfig | None = None) -> float:
        """Warm the contexts ``config`` runs with the batch shapes its loop will use
        (None: the target and draft with auto's), untimed, so that no timed figure and
        nothing auto learns carries a first call (see :mod:`.warmup`); a generation does
        it itself unless ``warmup`` is False. Returns the seconds it took."""
        with self.lease():
            return warmup.warm(self, config)

    # -- memory -------------------------------------------------------------------

    def memory(self, roles: Sequence[str] = ("target", "draft")) -> MemoryReport:
        models = []
        if "target" in roles:
            models.append(self.target.memory())
        if "draft" in roles:
            # the draft file's memory, else what the source drafting with adds (the MTP heads' context)
            first = [DRAFT_MODEL, self._in_use] + list(self.sources)
            extra = next((m for m in (self.sources[n].memory() for n in dict.fromkeys(first) if n in self.sources)
                          if m is not None), None)
            if extra is not None:
                models.append(extra)
        return report(models)


@dataclass
class Generation:
    """A finished generation, with everything a report needs."""

    steps: list[Step]
    config: GenerationConfig
    prompt: list[int]

    @property
    def stats(self) -> Stats:
        return self.steps[-1].stats

    @property
    def tokens(self) -> list[int]:
        return [t.token for s in self.steps for t in s.tokens]

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.steps)

    @property
    def stop_reason(self) -> str | None:
        return self.steps[-1].stop_reason if self.steps else None

    def to_dict(self, memory: MemoryReport | None = None) -> dict:
        st = self.stats.to_dict()
        d = {
            "config": {
                "proposer": self.config.proposer,
                "k": self.config.k,
                "p_min": self.config.p_min,
                "temperature": self.config.sampling.temperature,
                "top_k": self.config.sampling.top_k,
                "top_p": self.config.sampling.top_p,
                "min_p": self.config.sampling.min_p,
                "seed": self.config.seed,
                "max_tokens": self.config.max_tokens,
            },
            "text": self.text,
            "tokens": self.tokens,
            "stop_reason": self.stop_reason,
            "stats": st,
            # the controller's decisions, step by step (why it drafted or did not)
            "steps": [{"drafted": s.drafted, "accepted": s.accepted, "decision": s.decision} for s in self.steps],
        }
        if memory is not None:
            d["memory"] = memory.to_dict()
        return d
