"""How close a quantized model's outputs stay to the float model's: one record per output, for
`qtool quantize` (its estimate, the auto choice, targets) and `qtool check --reference` alike.

Each output's kind comes from the graph, checked against the values (`output_kinds`):

- probability: written by LOGISTIC (through reshapes, concatenations, (de)quantization), values
  in [0, 1]; a mask when it has two or more axes longer than 1 (a probability per pixel);
- classes: written by SOFTMAX or LOG_SOFTMAX, the classes along the last axis;
- logits and boxes: a detector's pair of outputs, `[..., anchors, 1]` scores beside
  `[..., anchors, K]` box (and keypoint) offsets for the same anchors;
- regression: anything else (landmarks, embeddings, heatmaps, class logits without SOFTMAX:
  a user metric, `--metric`, tells more there).

`qtool.numerics.measures` computes the measures that fit each kind.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from qtool.heap import retained_heap
from qtool.model import Model
from qtool.numerics.measures import (
    BOXES,
    CLASSES,
    LOGITS,
    MASK,
    PROBABILITY,
    REGRESSION,
    THRESHOLD,
    OutputMeasures,
)

LITERT = "LiteRT"  # the integer model run by LiteRT's kernels
SIMULATION = "simulation"  # the float simulation of the plan (simulate.py)
# Ops that carry a value's kind through unchanged: an output read through them keeps the kind
# of what they read.
PASS_THROUGH = frozenset(
    ("DEQUANTIZE", "QUANTIZE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CONCATENATION")
)
PROBABILITY_OPS = frozenset(("LOGISTIC",))
CLASS_OPS = frozenset(("SOFTMAX", "LOG_SOFTMAX"))


@dataclass(frozen=True)
class OutputAccuracy:
    """One output of a quantized model against the float model's, over some samples.

    `sqnr_db` is the plain SQNR (inf: exact); `fitting_db` the SQNR that fits the kind (about
    the decision threshold for probabilities and logits, else the plain one), which choices and
    targets compare; `sample_min_db` and `sample_median_db` its spread over single samples;
    `measures` the kind's own measures (decision agreement, top-k agreement, errors...);
    `floored`: a probability whose values are so small on its grid (an RMS of fewer than 16
    steps) that the plain SQNR says little (read the decisions).
    """

    subgraph: int
    name: str
    kind: str
    sqnr_db: float
    fitting_db: float
    sample_min_db: float
    sample_median_db: float
    samples: int
    measured_in: str  # LITERT or SIMULATION
    measures: dict[str, float] = field(default_factory=dict, compare=False)
    floored: bool = False

    def to_dict(self) -> dict:
        """JSON-ready: dB as numbers (None when exact), measures by name."""
        return {
            "subgraph": self.subgraph,
            "name": self.name,
            "kind": self.kind,
            "sqnr_db": json_db(self.sqnr_db),
            "fitting_sqnr_db": json_db(self.fitting_db),
            "sample_min_db": json_db(self.sample_min_db),
            "sample_median_db": json_db(self.sample_median_db),
            "samples": self.samples,
            "measured_in": self.measured_in,
            "measures": {k: json_number(v) for k, v in self.measures.items()},
            "floored": self.floored,
        }

    def headline(self) -> str:
        """The kind's measures in words, for a summary line."""
        return measures_text(self.measures)


MEASURE_LABELS = {
    "decision_agreement": f"decisions at {THRESHOLD:g}",
    "max_abs_error": "max error",
    "iou": "IoU",
    "top1_agreement": "top-1",
    "top5_agreement": "top-5",
    "mean_abs_error": "mean error",
    "relative_error": "relative error",
    "detected_mean_abs_error": "mean error where detected",
}
SHARES = frozenset(("decision_agreement", "top1_agreement", "top5_agreement", "relative_error"))


def measures_text(measures: Mapping[str, float | None]) -> str:
    """An output's measures in words: "decisions at 0.5 100.0%, max error 0.0039"."""
    parts = []
    for name, value in measures.items():
        label = MEASURE_LABELS.get(name, name)
        if value is None:
            parts.append(f"{label} -")
        elif name in SHARES:
            parts.append(f"{label} {value:.1%}")
        else:
            parts.append(f"{label} {value:.3g}")
    return ", ".join(parts)


def json_db(value: float) -> float | None:
    """A dB figure for JSON: rounded, None when exact (inf)."""
    return None if value == math.inf else round(float(value), 3)


def json_number(value: float) -> float | None:
    """A measure for JSON: rounded to 6 significant digits, None when not finite."""
    return float(f"{value:.6g}") if math.isfinite(value) else None


def _source_op(model: Model, subgraph_index: int, tensor: int) -> str | None:
    """The op type that computes `tensor`'s values, looking through PASS_THROUGH ops (all of
    a CONCATENATION's inputs must agree)."""
    subgraph = model.subgraphs[subgraph_index]
    producers = subgraph.producers()
    seen: set[int] = set()
    while tensor in producers and tensor not in seen:
        seen.add(tensor)
        op = subgraph.operators[producers[tensor]]
        op_type = model.op_type(op)
        if op_type not in PASS_THROUGH:
            return op_type
        if op_type == "CONCATENATION":
            found = {_source_op(model, subgraph_index, t) for t in op.inputs if t >= 0}
            return found.pop() if len(found) == 1 else None
        tensor = op.inputs[0]
    return None


def _long_axes(shape: Sequence[int]) -> int:
    return sum(1 for d in shape if d > 1)


def output_kinds(
    model: Model, subgraph_index: int = 0, reference: Sequence[np.ndarray] | None = None
) -> list[str]:
    """Each output's kind (module docstring), from the graph and, where given, the float
    model's values on some samples (samples along axis 0)."""
    subgraph = model.subgraphs[subgraph_index]
    shapes = [list(subgraph.tensors[t].shape) for t in subgraph.outputs]
    kinds = []
    for k, t in enumerate(subgraph.outputs):
        source = _source_op(model, subgraph_index, t)
        values = None if reference is None else np.asarray(reference[k])
        if source in PROBABILITY_OPS and (values is None or _within_unit(values)):
            kinds.append(MASK if _long_axes(shapes[k]) >= 2 else PROBABILITY)
        elif source in CLASS_OPS and shapes[k] and shapes[k][-1] > 1:
            kinds.append(CLASSES)
        else:
            kinds.append(REGRESSION)
    for scores, boxes in detector_pairs(shapes, kinds):
        kinds[scores], kinds[boxes] = LOGITS, BOXES
    return kinds


def _within_unit(values: np.ndarray) -> bool:
    return values.size == 0 or (float(values.min()) >= 0.0 and float(values.max()) <= 1.0)


def detector_pairs(shapes: Sequence[Sequence[int]], kinds: Sequence[str]) -> list[tuple[int, int]]:
    """(scores, boxes) output positions of a detector: `[..., A, 1]` and `[..., A, K]` regressions
    with the same leading axes, A > 1 anchors, K > 1 values per anchor."""
    pairs = []
    for s, score_shape in enumerate(shapes):
        if kinds[s] != REGRESSION or len(score_shape) < 2 or score_shape[-1] != 1:
            continue
        if score_shape[-2] <= 1:
            continue
        for b, box_shape in enumerate(shapes):
            if (
                b != s
                and kinds[b] == REGRESSION
                and len(box_shape) == len(score_shape)
                and box_shape[:-1] == score_shape[:-1]
                and box_shape[-1] > 1
            ):
                pairs.append((s, b))
                break
    return pairs


def plan_output_steps(model: Model, plan) -> dict[int, float]:
    """The grid step of each subgraph output that a plan quantizes (output tensor -> scale)."""
    home = plan.home(model.subgraphs[plan.subgraph_index])
    return {
        t: float(np.max(plan.params[slot].scale))
        for t in model.subgraphs[plan.subgraph_index].outputs
        if (slot := home.get(t)) is not None and slot in plan.params
    }


def model_output_steps(model: Model, subgraph_index: int = 0) -> dict[int, float]:
    """The grid step of each output of a quantized model (output tensor -> scale): its own, or
    that of the integer tensor a DEQUANTIZE output reads."""
    subgraph = model.subgraphs[subgraph_index]
    producers = subgraph.producers()
    steps = {}
    for t in subgraph.outputs:
        source = t
        if t in producers and model.op_type(subgraph.operators[producers[t]]) == "DEQUANTIZE":
            source = subgraph.operators[producers[t]].inputs[0]
        quantization = subgraph.tensors[source].quantization
        if quantization is not None and quantization.scale is not None and len(quantization.scale):
            steps[t] = float(np.max(quantization.scale))
    return steps


class OutputsMeter:
    """Every output's measures, accumulated over chunks of samples (`add`), then `results`."""

    def __init__(
        self,
        names: Sequence[str],
        kinds: Sequence[str],
        shapes: Sequence[Sequence[int]],
        steps: Sequence[float | None] = (),
        subgraph: int = 0,
    ) -> None:
        self.names, self.kinds, self.subgraph = list(names), list(kinds), subgraph
        steps = list(steps) or [None] * len(self.names)
        self.meters = [OutputMeasures(kind, step) for kind, step in zip(kinds, steps, strict=True)]
        # Boxes are also measured where the detector fires: its paired scores above 0.
        self.boxes_of = {
            b: s
            for s, kind in enumerate(kinds)
            if kind == LOGITS
            for b, other in enumerate(kinds)
            if other == BOXES and list(shapes[b])[:-1] == list(shapes[s])[:-1]
        }
        self.samples = 0

    def add(self, reference: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> None:
        """One chunk: the float model's outputs and the quantized model's, samples along axis 0
        (the quantized outputs are reshaped to the reference's shapes)."""
        for k, (meter, want, have) in enumerate(zip(self.meters, reference, got, strict=True)):
            want = np.asarray(want)
            detected = None
            if k in self.boxes_of:
                scores = np.asarray(reference[self.boxes_of[k]])
                detected = scores.reshape(scores.shape[:-1]) > 0.0
            meter.add(want, np.reshape(have, want.shape), detected)
        self.samples += int(np.asarray(reference[0]).shape[0]) if reference else 0

    def results(self, measured_in: str) -> list[OutputAccuracy]:
        """The records of everything added."""
        records = []
        for name, meter in zip(self.names, self.meters, strict=True):
            low, median = meter.spread()
            records.append(
                OutputAccuracy(
                    subgraph=self.subgraph,
                    name=name,
                    kind=meter.kind,
                    sqnr_db=meter.sqnr_db,
                    fitting_db=meter.fitting_db,
                    sample_min_db=low,
                    sample_median_db=median,
                    samples=self.samples,
                    measured_in=measured_in,
                    measures=meter.values(),
                    floored=meter.floored(),
                )
            )
        return records


def measure_outputs(
    model: Model,
    subgraph_index: int,
    reference: Sequence[np.ndarray],
    got: Sequence[np.ndarray],
    measured_in: str,
    steps: dict[int, float] | None = None,
) -> list[OutputAccuracy]:
    """Every output's record for the float `reference` and quantized `got` outputs of a
    subgraph of `model` (the float model) on the same samples (axis 0)."""
    subgraph = model.subgraphs[subgraph_index]
    kinds = output_kinds(model, subgraph_index, reference)
    steps = steps or {}
    meter = OutputsMeter(
        [subgraph.tensors[t].name for t in subgraph.outputs],
        kinds,
        [subgraph.tensors[t].shape for t in subgraph.outputs],
        [steps.get(t) for t in subgraph.outputs],
        subgraph_index,
    )
    with retained_heap():  # the measures' temporaries: megabytes each, faulted in once
        meter.add(reference, got)
    return meter.results(measured_in)


def worst_fitting_db(records: Sequence[OutputAccuracy]) -> float:
    """The lowest fitting SQNR (dB) of some outputs; inf when there are none."""
    return min((r.fitting_db for r in records), default=math.inf)
