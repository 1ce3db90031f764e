"""The user's own measure of a quantized model (`--metric module:function`).

A metric is a function `metric(reference, outputs) -> float`: `reference` and `outputs` are
lists with one numpy array per model output (in the model's output order), the float model's
and the quantized model's on the same samples, samples along axis 0 (a declared leading 1 is
the sample axis). It returns one number, higher is better (return a negative error for an
error): top-1 agreement, the mean IoU of decoded boxes... It is loaded like a `--data`
generator (`qtool.calibrate.sample_sources.load_function`: a module from the current directory
first, or a file run as `python file.py` runs it), and whatever it raises or returns that is
not a finite number is one error line naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from qtool.calibrate.sample_sources import load_function
from qtool.errors import DataError, UsageError, exception_summary

MetricFunction = Callable[[list[np.ndarray], list[np.ndarray]], float]


class UserMetric:
    """A metric named on the command line (`module:function`) or given as a callable."""

    def __init__(self, source: str | MetricFunction) -> None:
        if isinstance(source, str):
            self.function, self.label = load_function(source, "metric")
            self.source = source
        elif callable(source):
            self.function = source
            self.label = getattr(source, "__qualname__", None) or type(source).__name__
            self.source = self.label
        else:
            raise UsageError(
                f"metric must be module:function or a callable, not {type(source).__name__}"
            )

    def __call__(self, reference: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> float:
        """The metric of `outputs` against `reference`; DataError for anything but a finite
        number, or for what the function raises."""
        named = f"`metric={self.source!r}`"
        try:
            value = self.function([np.array(r) for r in reference], [np.array(o) for o in outputs])
        except (Exception, SystemExit) as exc:
            raise DataError(f"{named}: {self.label} raised {exception_summary(exc)}") from exc
        try:
            number = float(np.asarray(value, dtype=np.float64).item())
        except (TypeError, ValueError):
            raise DataError(
                f"{named}: {self.label} returned {type(value).__name__}, not a number"
            ) from None
        if not math.isfinite(number):
            raise DataError(f"{named}: {self.label} returned {number}, not a finite number")
        return number


def as_metric(metric: str | MetricFunction | UserMetric | None) -> UserMetric | None:
    """A UserMetric from what a user gave (None stays None)."""
    if metric is None or isinstance(metric, UserMetric):
        return metric
    return UserMetric(metric)
