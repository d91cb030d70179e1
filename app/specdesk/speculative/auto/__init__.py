"""``auto``: a draft length chosen step by step, drafting only while drafting has been
measured to pay.

auto judges by outcomes. It keeps the realized cost per emitted token of its own
recent steps, measured end to end: the step's whole time (propose with the draft's
catch-up, verify, roll back, the Python around them) over the tokens the step added
to the answer (:class:`~costmodel.Outcome`, a ratio estimator with its standard
error). Target alone (k = 0) is one such outcome, in seconds per token, shared by
every source and measured as it runs alone: not the step right after the draft model
ran (which pays for the draft's run in the caches: that is charged to drafting); a
step slowed by something else on the machine counts as at most ``spike`` times the
fastest recent one; and whenever a verify batch timed since seems to cost less than
one target step (impossible: the step was timed while something slowed it), or every
``stale_steps`` while drafting pays, auto times target alone again (``measuring
target alone``, two steps). A reference that looks too dear would make any draft look
cheap: this is how the app's slowed first steps (its start-up work beside the first
answer) once made auto draft a whole answer that target alone would have written
faster. Drafting outcomes are compared with target alone's current cost: one per
source and band of draft lengths (the judge; n-gram lookups per match-length bucket,
since a long match predicts far better than a short one; bands of 1-3, 4-7, 8-15 and
16 or more tokens, since where verifying is cheap a long draft costs less per token
than a short one, and a loss at k=2 must not condemn k=16) and one per source and k,
which corrects the prior where it was measured.

The judge is a sequential test on each source, not a bandit over k. A bandit (UCB,
Thompson sampling) keeps sampling every arm that might be best, at a regret that
grows with the answer; on most CPUs every drafting arm loses, so what exploring may
cost must be fixed in advance, and exploring must stop as soon as the evidence says
"loses". With both estimates' uncertainty (the ratio's standard error, target
alone's relative one, both growing the longer ago they were measured):

- ``measured cheaper``: the source's ratio is below 1 by ``z_on`` standard errors; it
  drafts, and goes on drafting while the ratio stays below 1;
- ``measured dearer``: the ratio is above 1 by ``z_refute`` standard errors, over two
  steps at least; that band of the source drafts no more while that holds (another
  band the estimate says pays is still tried);
- in between it is undecided: where the estimate says a k pays it drafts it as a
  ``probe`` (counted by the judge); where target alone's own uncertainty is most of
  the doubt it times target alone (``measuring target alone``).

Exploring is bounded by a budget: what drafting has cost beyond target alone for the
same tokens (every drafting step, its catch-up, the first target step after it and
the draft's prompt prefill; steps that won give it back) may not exceed
``budget_share`` (2.5%) of the session's expected target-alone time (its tokens so
far and the room left in this answer). A probe or exploration that would cross it
is not made (``probe budget spent``). One exception, the entry ticket: a draft model
never tried on this pair evaluates the prompt up front, and its first probe is not
held back by that prefill (without which no draft could ever be tried in sync).

The component cost model (:mod:`~specdesk.speculative.costmodel`: verify seconds per
batch size, draft seconds per length and per steady decode, and acceptance per
position, all measured in the loop, plus the loop's measured overhead per step beyond
those calls) is the prior. A batch that changed its context's shape (llama.cpp built
its graph again: milliseconds on a GPU) is not taken as what its size costs, since a
steady run of drafting does not pay it; the step's outcome still counts it whole. The
prior looks as far as ``k_max`` (32: on a GPU the verify batch is cheap and a small
draft model is launch-bound, so long drafts win): it chooses which
k to try, pooled with the (source, k) outcome wherever one was measured, each
weighted by its precision (the prior as uncertain as ``prior_cv``). Where the
estimate says no k pays (``estimated dearer``), a k is still tried now and then
(``explore``, priced at its worst, not counted by the judge) while an optimistic
acceptance and the low prior slope of batch sizes never measured leave room for a
gain: exploring goes where the prior is least sure, the longest such k the budget
affords, and the wait between explorations doubles (8, 16, ... 128 steps). When even
a draft that is always right cannot pay at the loop's costs (``bound<1``), nothing is
tried. The prior never decides that drafting pays: only the source's outcome does.

A draft model that sat out some steps must first catch up on every token since it
last synced, paid once before anything is won: auto resumes only when the gain
estimated per token over the answer left outweighs it (``catch-up too dear``). The
first draft of a session drafts at most ``first_draft_k`` tokens: one short probe is
the cheapest way to learn that drafting cannot pay.

Until the first token of a source's drafts is rejected, a draft all kept that was the
longest it ever drafted is followed by one up to ``grow`` (4) times longer (``longer,
all accepted``): a slow start, as TCP's, which ends at the first loss. Its length is
the one the hopeful row estimates cheapest (the costs as measured; each position judged
at an upper bound of its own acceptance, the positions never judged at one of the
pooled rate), while the budget affords what it costs beyond the estimate's k at its
worst and target alone's timing stands. Without it an always-right draft reaches a
long k only as fast as the estimated acceptance of positions never drafted creeps up
(2, 3, 5, 7, 9, 9, 9, 9, 19), and a 256-token answer is half over first; with it, 2,
8, 32. The answer's last draft takes all the tokens left where that costs less than
the step they would otherwise need. A decode far dearer than the other decodes of the
same draft (a page fault, a GC pause) is a one-off inside the call: the draft's costs
are learnt without it (:func:`~specdesk.speculative.costmodel.one_off_excess`), the
step's outcome keeps it. A step whose verify batch paid its size's set-up (the backend
says so) is held from the outcomes as from the budget, until the next of its kind.

Every call to ``budget`` leaves a :class:`Decision` (k and why), which the decoder puts
on the Step and in the statistics; :attr:`AutoK.estimate` gives an :class:`Estimate`
(drafting against target alone, per emitted token, with intervals) for the app to
show. What was measured carries over to the next session on the pair (see
:mod:`specdesk.session.costcache`).

The parts: :mod:`.policy` (the choice, step by step), :mod:`.judge` (the sequential
test and the outcomes per k), :mod:`.prior` (the component costs' predictions),
:mod:`.reference` (target alone's cost), :mod:`.explore` (the budget), :mod:`.saved`
(what carries over) and :mod:`.outcomes` (the arms' keys and how an outcome is weighed).
"""

from .outcomes import K_BANDS, NGRAM_BUCKETS, band, ngram_bucket, source_key
from .policy import AutoK

__all__ = ["AutoK", "K_BANDS", "NGRAM_BUCKETS", "band", "ngram_bucket", "source_key"]


