"""The Python API the CLI, the benchmarks and the app share: load a pair, stream a
generation step by step, cancel between steps, read statistics and memory.

    from specdesk.session import GenerationConfig, ModelSpec, Session

    with Session.load(ModelSpec("target.gguf"), ModelSpec("draft.gguf")) as s:
        prompt = s.chat_prompt([{"role": "user", "content": "Write a haiku"}])
        for step in s.generate(prompt, GenerationConfig(proposer="draft", k="auto")):
            print(step.text, end="", flush=True)
        print(step.stats.acceptance_rate, step.stats.tokens_per_second)
        print(s.memory().to_dict())
"""

from .config import GenerationConfig, ModelSpec, translated_refusal
from .core import Generation, LoadedModel, LoadProgress, ModelsUnloaded, Session, check_model_file
from .runtime import (
    Device,
    MemoryReport,
    backends,
    build_info,
    ctrl_c_guard,
    default_threads,
    devices,
    gpu_build_hint,
    gpu_layers_note,
    gpu_memory,
    interrupted,
    repack_types,
    rss_bytes,
    stop_if_interrupted,
    supports_gpu_offload,
)

__all__ = [
    "GenerationConfig", "ModelSpec", "translated_refusal",
    "Generation", "LoadedModel", "LoadProgress", "ModelsUnloaded", "Session", "check_model_file",
    "Device", "MemoryReport", "backends", "build_info", "ctrl_c_guard", "default_threads", "devices", "gpu_build_hint",
    "gpu_layers_note", "gpu_memory", "interrupted", "repack_types", "rss_bytes", "stop_if_interrupted",
    "supports_gpu_offload",
]
