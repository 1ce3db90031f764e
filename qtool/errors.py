"""Error types shared by every layer.

The CLI turns any QtoolError into a one-line ``qtool: error: ...`` message with its exit code,
so library code raises these for anything a user can cause (bad files, bad data, bad options).

A message names a parameter as Python callers know it, in backquotes: `engine`, or with a value,
`engine='litert'`, `force=True`. The command line shows the option that sets it instead
(--engine, --engine litert, --force), so one message serves both.
"""


class QtoolError(Exception):
    """A problem with the user's input or options; exit code 2 on the command line."""

    exit_code = 2


class ModelError(QtoolError):
    """The model file is missing, unreadable, not TFLite, or internally inconsistent."""


class DataError(QtoolError):
    """Calibration or array data is missing, malformed, or does not match the model."""


class UsageError(QtoolError):
    """Options that contradict each other or values out of their domain."""


class UnsupportedOpError(QtoolError):
    """An operator has no kernel in the engine (and none was registered)."""


def first_line(message: object, default: str = "") -> str:
    """The first line of a message or an exception's (`default` when it has none)."""
    text = str(message).strip()
    return text.splitlines()[0] if text else default


def exception_summary(exc: BaseException) -> str:
    """`Type: first line of the message`, or the type alone: a foreign exception in one line."""
    text = first_line(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
