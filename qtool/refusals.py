"""What a quantization refuses to write, and why: a target missed (on the search's samples, on
samples no choice saw, or within the float model's size), operators that cannot be int8 under
`--strict`, a model over `--max-size`. Each is an error with exit code 1; nothing is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from qtool.errors import QtoolError, UsageError
from qtool.quantize import QuantizeOptions, QuantizeResult
from qtool.quantize.search import BUDGET
from qtool.quantize.weight_plan import FULL
from qtool.quantize.weight_quantizer import weight_search_failure


class StrictModeError(QtoolError):
    """--strict and some operators cannot be int8: exit code 1, nothing written."""

    exit_code = 1


class TargetNotReachedError(QtoolError):
    """A target SQNR that the allowed remedies cannot reach: exit code 1, nothing written."""

    exit_code = 1


class SizeLimitError(QtoolError):
    """The quantized model exceeds `max_size`: exit code 1, nothing written."""

    exit_code = 1


@dataclass(frozen=True)
class SizeLimit:
    """The largest model a run may write: a number of bytes, or a ratio of the input's size
    (`--max-size 1500000`, `--max-size 0.5x`)."""

    value: float
    ratio: bool

    @classmethod
    def parse(cls, text: str | int | float) -> SizeLimit:
        """`BYTES` (a whole number) or `RATIOx` (a positive number then x); UsageError else."""
        raw = str(text).strip()
        ratio = raw.lower().endswith("x")
        number = raw[:-1] if ratio else raw
        try:
            value = float(number) if ratio else int(number)
        except ValueError:
            value = -1
        if not (value > 0 and math.isfinite(value)):
            raise UsageError(
                f"`max_size={raw!r}` is neither a number of bytes (1500000) nor a positive "
                "ratio of the input's size (0.5x)"
            )
        return cls(float(value), ratio)

    def bytes_for(self, input_bytes: int) -> int:
        """The limit in bytes for an input of `input_bytes`."""
        return int(self.value * input_bytes) if self.ratio else int(self.value)

    def describe(self, input_bytes: int) -> str:
        """The limit as a message says it: "1,000 bytes", or "0.5x the input: 37,184 bytes"."""
        limit = f"{self.bytes_for(input_bytes):,} bytes"
        return f"{self.value:g}x the input: {limit}" if self.ratio else limit


def _worst_output(result, s: int) -> str:
    """The estimate's worst output of subgraph `s`, in words."""
    rows = [a for a in result.accuracy if a.subgraph == s]
    if not rows:
        return "no estimate"
    worst = min(rows, key=lambda a: a.fitting_db)
    text = f"worst output {worst.name} {worst.fitting_db:.1f} dB"
    if s in result.metric:
        text += f", metric {result.metric[s]:.4g}"
    return text


def target_failure(result) -> str | None:
    """Why the target was missed, or None: the places that would need float when the search
    fell short; both measurements when the samples no choice saw contradict the search's."""
    parts = []
    for s, search in result.searches.items():
        if result.mode != FULL and not search.reached:
            parts.append(weight_search_failure(search))
        elif search.stopped is not None:
            recipe = search.recipe
            metric = "" if search.metric is None else f", metric {search.metric:.4g}"
            why = (
                f"its time budget ran out after {search.seconds:.0f} s and {search.candidates} "
                "candidates (--budget SECONDS allows more)"
                if search.stopped == BUDGET
                else "the float places it would need make the model bigger than the float model"
            )
            parts.append(
                f"subgraph {s}: {why}; the best candidate measured had worst output "
                f"{min(search.output_sqnr):.1f} dB{metric} with {len(recipe.int16_tensors)} "
                f"int16 and {len(recipe.float_ops)} float places"
            )
        elif not search.reached:
            worst = min(search.output_sqnr)
            places = ", ".join(
                f"{n.op_type} {n.name} ({n.place.kind})" for n in search.needs_float[:5]
            )
            metric = "" if search.metric is None else f", metric {search.metric:.4g}"
            parts.append(
                f"subgraph {s}: worst output {worst:.1f} dB{metric} after "
                f"{len(search.remedies)} remedies; most of the remaining noise comes from {places}"
            )
        elif not result.target_confirmed.get(s, False):
            metric = "" if search.metric is None else f", metric {search.metric:.4g}"
            parts.append(
                f"subgraph {s}: reached on the samples the search judged it on (worst output "
                f"{min(search.output_sqnr):.1f} dB{metric}), but not on samples that no choice "
                f"saw ({_worst_output(result, s)}, {result.accuracy_source})"
            )
    return "; ".join(parts) or None


def _target_text(options: QuantizeOptions) -> str:
    """The target in words: "target SQNR 30 dB", "target metric 0.95", or both."""
    parts = []
    if options.target_sqnr is not None:
        parts.append(f"target SQNR {options.target_sqnr:g} dB")
    if options.target_metric is not None:
        parts.append(f"target metric {options.target_metric:g}")
    return " and ".join(parts)


def refuse_missed_target(result: QuantizeResult, options: QuantizeOptions) -> None:
    """TargetNotReachedError when the target was missed (`target_failure`)."""
    missed = target_failure(result)
    if missed:
        remedy = (
            ""
            if options.allow_float or all(r.reached for r in result.searches.values())
            else " (allowing float would let them stay float)"
        )
        raise TargetNotReachedError(f"{_target_text(options)} not reached: {missed}{remedy}")


def refuse_size(
    result: QuantizeResult,
    report: dict[str, Any],
    blob: bytes,
    options: QuantizeOptions,
    max_size: SizeLimit | None,
) -> None:
    """TargetNotReachedError when a target's result is bigger than what it replaces,
    SizeLimitError when the model `blob` is over `max_size`."""
    source_bytes = report["input_model"]["size_bytes"]
    if (
        result.searches
        and max_size is None
        and len(blob) > max(source_bytes, result.baseline_size or 0)
    ):
        # A target's result is a quantization only if it is smaller than what it replaces (or,
        # for a model so small that plain int8 is bigger, than plain int8); a size the user
        # gives (`max_size`) replaces that bound.
        raise TargetNotReachedError(
            f"{_target_text(options)} not reached within the float model's size: the result "
            f"would be {len(blob):,} bytes, the float model {source_bytes:,} "
            f"({_precision_counts(report)}); nothing written"
        )
    if max_size is not None:
        limit = max_size.bytes_for(report["input_model"]["size_bytes"])
        if len(blob) > limit:
            grew = ", ".join(f"{r['part']} {r['bytes']:+,}" for r in report["size"]["grew"][:3])
            raise SizeLimitError(
                f"the quantized model is {len(blob):,} bytes, over `max_size` "
                f"({max_size.describe(report['input_model']['size_bytes'])}); nothing written"
                + (f" (grew: {grew})" if grew else "")
            )


def _precision_counts(report: dict[str, Any]) -> str:
    ops = report["sqnr_target"]["ops"]
    return ", ".join(f"{count} {mode}" for mode, count in ops.items()) + " ops"
