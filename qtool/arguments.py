"""Checks of the values a Python caller passes, worded as every qtool message names a parameter.

The command line's parser hands the library values of the right type; a Python caller can pass
anything (`samples='10'`, `samples=-5`, a misspelt keyword). Each entry of the API checks its
arguments with these before any work, so that what a caller gets wrong is a UsageError naming
the parameter (the command line shows the option that sets it instead), never a TypeError from
deep inside.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from qtool.errors import UsageError


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def sample_limit(samples: Any) -> int | None:
    """`samples`: None (every sample) or a whole number of at least 1."""
    if samples is None:
        return None
    if isinstance(samples, bool) or not isinstance(samples, int):
        raise UsageError(f"`samples` must be a whole number of samples, not {_shown(samples)}")
    if samples < 1:
        raise UsageError("`samples` must be at least 1")
    return samples


def flag(name: str, value: Any) -> bool:
    """A True/False parameter."""
    if not isinstance(value, bool):
        raise UsageError(f"`{name}` must be True or False, not {_shown(value)}")
    return value


def number(name: str, value: Any) -> float:
    """A finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"`{name}` must be a finite number, not {_shown(value)}")
    return float(value)


def choice(name: str, value: Any, choices: Iterable[str], optional: bool = False) -> str | None:
    """One of `choices` (or None when `optional`)."""
    if value is None and optional:
        return None
    allowed = list(choices)
    if value not in allowed:
        raise UsageError(f"`{name}` must be one of {', '.join(allowed)}, not {_shown(value)}")
    return value


def callback(name: str, value: Any) -> Any:
    """A function to call, or None."""
    if value is not None and not callable(value):
        raise UsageError(f"`{name}` must be a function or None, not {_shown(value)}")
    return value


def patterns(name: str, value: Any) -> tuple[str, ...]:
    """A list of strings (one string would be read letter by letter: refused)."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise UsageError(f"`{name}` must be a list of patterns, not {_shown(value)}")
    items = tuple(value)
    if not all(isinstance(item, str) for item in items):
        raise UsageError(f"`{name}` must be a list of strings, not {_shown(value)}")
    return items


def known_keywords(function: str, given: Mapping[str, Any], known: Iterable[str]) -> None:
    """Every keyword in `given` is one of `known`."""
    allowed = sorted(known)
    for key in given:
        if key not in allowed:
            raise UsageError(
                f"{function}() has no parameter `{key}` (its options: {', '.join(allowed)})"
            )
