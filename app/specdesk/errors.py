"""Errors a user can act on. Each carries a one-line message; the CLI prints it and
exits with code 2, the app shows it in the window."""


class SpecDeskError(Exception):
    """A problem with the user's input or environment, explained in one line."""


class ModelFileError(SpecDeskError):
    """A GGUF file that is missing, unreadable, not a GGUF, truncated or malformed."""


class IncompatibleDraftError(SpecDeskError):
    """A draft model whose vocabulary does not match the target's."""


class ContextOverflowError(SpecDeskError):
    """A prompt or generation that does not fit in the context window."""


class FetchError(SpecDeskError):
    """Fetching the default models failed."""


class Cancelled(SpecDeskError):
    """The user cancelled a long operation."""


class RpcError(SpecDeskError):
    """An RPC server (llama.cpp's RPC backend) that cannot be used: unreachable, refusing,
    another protocol version, gone mid-generation, or a build without RPC."""


class NonFiniteLogitsError(ModelFileError):
    """A model computed logits that are not numbers (NaN, infinity): its weights are
    damaged (or its backend failed). Its tokens would be noise, and a draft's would
    bend the sampler: the generation stops with this instead. ``role``: which model."""

    def __init__(self, role: str = "the model") -> None:
        self.role = role
        fix = "; load another draft" if "draft" in role else ""
        super().__init__(f"{role} computed logits that are not numbers (NaN or infinity): its weights are damaged, "
                         f"or its backend failed{fix}")
