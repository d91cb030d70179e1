"""Synthetic GGUFs that llama.cpp loads and runs with its real kernels, for tests and
benchmarks of architectures no small real model can stand in for.

- :mod:`synth.hybrid`: Qwen3.5 (``qwen35``): gated delta-net and full-attention layers,
  optionally one NextN (MTP) block that agrees with the trunk (or a random one);
- :mod:`synth.swa`: Gemma 3 (``gemma3``) with a sliding-window layer;
- :mod:`synth.world`: the rules of their text, shared by a target and its drafts, so
  that each model's next token depends on more than the last one and a state rolled back
  wrongly changes what it says;
- :mod:`synth.mtp`: GLM-4.5 and Step 3.5 with NextN heads (tools/make_mtp_model.py);
- :mod:`synth.tiny_llama`, :mod:`synth.mutations`: the tiny llama and SPM models of the
  GGUF tests, and the header mutations of their fuzz;
- :mod:`synth.tiny_vocab`: the tiny byte-level BPE (and SPM) vocabularies they all share,
  which :mod:`synth.vocab` writes into a file.

Put tools/ on ``sys.path`` and ``from synth.hybrid import HybridSpec, write_hybrid_model``
(tools/make_hybrid_model.py is the command line).
"""
