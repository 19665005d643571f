"""Domain errors. Each carries what the caller did wrong; wire/ renders them per protocol."""

from __future__ import annotations


class DecideError(Exception):
    """Base of every error decide raises on purpose."""


class InvalidRequest(DecideError):
    """The request breaks a rule of the internal model (empty choices, duplicates, ...).

    `path` locates the offending value as a tuple of keys and indices, e.g.
    ("questions", 2, "options", 1, "value"); `code` is a short machine-readable reason.
    """

    def __init__(self, message: str, path: tuple = (), code: str = "invalid_value") -> None:
        super().__init__(message)
        self.message = message
        self.path = tuple(path)
        self.code = code


class UnsupportedInput(DecideError):
    """The request is valid but the loaded model cannot take it (images on a text-only model)."""

    def __init__(self, message: str, path: tuple = (), code: str = "image_input_not_supported") -> None:
        super().__init__(message)
        self.message = message
        self.path = tuple(path)
        self.code = code


class ContextLengthExceeded(DecideError):
    """A rendered prompt plus one of its candidates is longer than the model's context."""

    def __init__(self, message: str, question_index: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.question_index = question_index


class ModelNotFound(DecideError):
    """The model spec names nothing decide can load; the message says what to do."""


class ModelLoadError(DecideError):
    """A model was found but could not be loaded (corrupt file, unsupported tensor type...)."""
