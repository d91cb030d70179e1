"""llama.cpp's rules on plain values, without llama.cpp: what the engine computes for a
loaded model and the library for a file that is not loaded go through the same code.

``vocab``  which drafts may draft for a target (``common_speculative_are_compatible``);
``kv``     the KV cache's size and the head size it is computed from.
``mtp``    which models' multi-token-prediction heads can draft.
``rollback`` how a recurrent, hybrid or sliding-window model rolls back, and what it costs.

Pure Python: no llama_cpp, no files, no Qt (an import contract keeps it so).
"""
