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
