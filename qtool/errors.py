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
