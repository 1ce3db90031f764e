"""Measures of how far an output strays from its reference that fit what the output is.

SQNR says how large the error is against the output's own power. That reads well for a
regression, badly for a probability that sits near 0: one step of its 1/256 grid is then as
large as the signal, and the SQNR says -14 dB while every decision is right. Each output kind
gets the measures its users read, all accumulated a chunk of samples at a time (exact sums and
counts, so chunks and shards add up):

- probability (a LOGISTIC output) and mask (a probability per pixel): the decisions at the
  threshold that agree, the largest absolute error, and for masks the IoU of the two
  thresholded masks;
- logits (a detector's score before its sigmoid): the same, on the probability;
- classes (a SOFTMAX output): top-1 and top-5 agreement (the float model's top class among the
  quantized model's top k);
- regression and boxes: the mean absolute error and the relative error (mean absolute error
  over the mean absolute reference); boxes also on the anchors the detector fires on.

And one figure in dB for every kind, the *fitting SQNR*, which choices and targets compare
across outputs: the plain SQNR for regressions, boxes and classes; for probabilities (and
logits read as probabilities) the SQNR of the distance to the decision threshold, `p - t`: an
output far from its threshold tolerates more noise, one that hovers at it none.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from qtool.numerics.metrics import SqnrAccumulator, sqnr_from_sums

PROBABILITY = "probability"
MASK = "mask"
LOGITS = "logits"
CLASSES = "classes"
BOXES = "boxes"
REGRESSION = "regression"
KINDS = (PROBABILITY, MASK, LOGITS, CLASSES, BOXES, REGRESSION)
DECIDED = frozenset((PROBABILITY, MASK, LOGITS))  # read as decisions at a threshold

THRESHOLD = 0.5  # the decision threshold of a probability (a logit's is 0)
TOP_K = 5
# A probability whose float values have an RMS of fewer steps of its grid than this has a plain
# SQNR set by the grid, not by the quantization of the model: the report says so.
FLOOR_STEPS = 16


def sigmoid(values: np.ndarray) -> np.ndarray:
    """The logistic function in float64, without overflow warnings for large logits."""
    values = np.asarray(values, np.float64)
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-values))


def _rows(values: np.ndarray) -> np.ndarray:
    """Samples along axis 0, everything else flattened, in float64."""
    values = np.asarray(values, np.float64)
    return values.reshape(values.shape[0], -1) if values.ndim else values.reshape(1, 1)


def sample_sqnr(reference: np.ndarray, test: np.ndarray, centre: float = 0.0) -> np.ndarray:
    """Each sample's SQNR (dB) of `test` against `reference` (samples along axis 0), the signal
    measured from `centre` (a decision threshold; 0 for the plain SQNR)."""
    ref, got = _rows(reference), _rows(test)
    return _row_sqnr(np.sum((ref - centre) ** 2, axis=1), (ref - got) ** 2)


def _row_sqnr(signal: np.ndarray, noise_squares: np.ndarray) -> np.ndarray:
    """Each row's SQNR (dB) from the sum of its signal's squares and the squares of its
    noise."""
    noise = np.sum(noise_squares, axis=1)
    return np.array(
        [sqnr_from_sums(float(s), float(n)) for s, n in zip(signal, noise, strict=True)]
    )


@dataclass(frozen=True)
class _ReferenceTerms:
    """What a chunk's measures read from the reference alone. A choice measures every
    candidate against the same reference outputs: computed once per reference array
    (pose_landmark_full's mask, 16 samples: the sigmoid of 1M values, half of a measure)."""

    power: float  # the sum of the reference's squares
    judged: np.ndarray | None  # a logit's probability (float64), compared in its place
    fitting: float  # the sum of the fitting signal's squares
    fitting_rows: np.ndarray | None  # ... per sample
    magnitude: float  # the sum of |judged reference|
    above: np.ndarray | None  # decisions: the judged reference above the threshold


_TERMS: dict[tuple[int, str], tuple[weakref.ref, _ReferenceTerms]] = {}
_TERMS_KEPT = 16  # references whose terms are kept (the folds' outputs, a few each)
_TERMS_LOCK = threading.Lock()


def _reference_terms(reference: np.ndarray, kind: str) -> _ReferenceTerms:
    """The terms of `reference` for an output of `kind`; remembered while the array lives if it
    is read-only (an evaluation set's: nothing can change it meanwhile)."""
    kept = isinstance(reference, np.ndarray) and not reference.flags.writeable
    key = (id(reference), kind)
    with _TERMS_LOCK:
        known = _TERMS.get(key) if kept else None
    if known is not None and known[0]() is reference:
        return known[1]
    ref = np.asarray(reference, np.float64)
    judged = sigmoid(ref) if kind == LOGITS else ref
    centre = THRESHOLD if kind in DECIDED else 0.0
    signal = (judged - centre) ** 2 if kind in DECIDED else ref**2
    rows = (ref.shape[0], -1) if ref.shape[:1] and ref.shape[0] else None
    terms = _ReferenceTerms(
        power=float(np.sum(ref**2)),
        judged=judged if kind == LOGITS else None,
        fitting=float(np.sum(signal)),
        fitting_rows=None if rows is None else np.sum(signal.reshape(rows), axis=1),
        magnitude=float(np.abs(judged).sum()),
        above=judged > THRESHOLD if kind in DECIDED else None,
    )
    if kept:
        with _TERMS_LOCK:
            while len(_TERMS) >= _TERMS_KEPT:
                del _TERMS[next(iter(_TERMS))]  # the oldest
            _TERMS[key] = (weakref.ref(reference), terms)
    return terms


@dataclass
class OutputMeasures:
    """The measures of one output's kind, accumulated over chunks of samples.

    `step`: the spacing of the output's integer grid in the quantized model (None: unknown),
    which tells when a probability's SQNR is set by the grid; `detected` in `add`: for boxes,
    which anchors the detector fires on (the float model's score above its threshold).
    """

    kind: str
    step: float | None = None
    sqnr: SqnrAccumulator = field(default_factory=SqnrAccumulator)
    fitting: SqnrAccumulator = field(default_factory=SqnrAccumulator)
    per_sample: list[np.ndarray] = field(default_factory=list)  # fitting SQNR of each sample
    elements: int = 0
    agree: int = 0  # decisions (or top-1) that agree
    agree_k: int = 0
    inside_k: int = 0  # decisions counted for top-k
    intersection: int = 0
    union: int = 0
    largest_error: float = 0.0
    abs_error: float = 0.0
    abs_reference: float = 0.0
    detected_error: float = 0.0
    detected_elements: int = 0

    def add(self, reference: np.ndarray, test: np.ndarray, detected: np.ndarray | None = None):
        """Add one chunk of samples (axis 0) of the float reference and the quantized output."""
        # Each difference and square computed once (an output of pose_landmark_full is 2.6M
        # values a chunk): the same arrays summed the same way as one computation per measure;
        # what depends on the reference alone, once per reference (`_reference_terms`).
        terms = _reference_terms(reference, self.kind)
        ref = np.asarray(reference, np.float64)
        got = np.asarray(test, np.float64).reshape(ref.shape)
        difference = ref - got
        noise = difference**2
        self.sqnr.signal += terms.power
        self.sqnr.noise += float(np.sum(noise))
        if self.kind == LOGITS:
            got = sigmoid(got)
            difference = terms.judged - got
            noise = difference**2
        self.fitting.signal += terms.fitting
        self.fitting.noise += float(np.sum(noise))
        if terms.fitting_rows is not None:
            rows = (ref.shape[0], -1)
            self.per_sample.append(_row_sqnr(terms.fitting_rows, noise.reshape(rows)))
        error = np.abs(difference)
        self.elements += ref.size
        self.largest_error = max(self.largest_error, float(error.max(initial=0.0)))
        self.abs_error += float(error.sum())
        self.abs_reference += terms.magnitude
        if self.kind in DECIDED:
            above, got_above = terms.above, got > THRESHOLD
            self.agree += int(np.sum(above == got_above))
            self.intersection += int(np.sum(above & got_above))
            self.union += int(np.sum(above | got_above))
        elif self.kind == CLASSES:
            self._add_classes(ref, got)
        elif self.kind == BOXES and detected is not None:
            fired = np.broadcast_to(np.asarray(detected, bool), ref.shape[:-1])
            self.detected_error += float(error[fired].sum())
            self.detected_elements += int(error[fired].size)

    def _add_classes(self, ref: np.ndarray, got: np.ndarray) -> None:
        """Top-1 and top-k agreement over the last axis (a position per row of classes)."""
        classes = ref.shape[-1] if ref.ndim else 1
        ref_rows, got_rows = ref.reshape(-1, classes), got.reshape(-1, classes)
        top = ref_rows.argmax(axis=1)
        self.agree += int(np.sum(top == got_rows.argmax(axis=1)))
        k = min(TOP_K, classes)
        best_k = np.argpartition(-got_rows, k - 1, axis=1)[:, :k]
        self.agree_k += int(np.sum(np.any(best_k == top[:, None], axis=1)))
        self.inside_k += ref_rows.shape[0]

    @property
    def sqnr_db(self) -> float:
        """The plain SQNR (dB) of everything added; inf when exact."""
        return self.sqnr.db

    @property
    def fitting_db(self) -> float:
        """The fitting SQNR (dB): the plain one, or about the decision threshold."""
        return sqnr_from_sums(self.fitting.signal, self.fitting.noise)

    def spread(self) -> tuple[float, float]:
        """The lowest and the median per-sample fitting SQNR (dB); (inf, inf) when exact."""
        values = np.concatenate(self.per_sample) if self.per_sample else np.array([np.inf])
        return float(values.min()), float(np.median(values))

    def floored(self) -> bool:
        """Whether a probability's float values have an RMS of fewer than FLOOR_STEPS steps of
        its grid: its plain SQNR is then set by the grid (a few steps of error are as large as
        the signal), whatever the decisions."""
        if self.kind not in (PROBABILITY, MASK) or not self.elements:
            return False
        step = self.step if self.step else 1.0 / 256
        return float(np.sqrt(self.sqnr.signal / self.elements)) < FLOOR_STEPS * step

    def values(self) -> dict[str, float]:
        """The kind's measures by name (shares in [0, 1], errors in the output's units)."""
        if not self.elements:
            return {}
        if self.kind in DECIDED:
            found = {
                "decision_agreement": self.agree / self.elements,
                "max_abs_error": self.largest_error,
            }
            if self.kind == MASK:
                found["iou"] = self.intersection / self.union if self.union else 1.0
            return found
        if self.kind == CLASSES:
            return {
                "top1_agreement": self.agree / max(self.inside_k, 1),
                f"top{TOP_K}_agreement": self.agree_k / max(self.inside_k, 1),
            }
        found = {
            "mean_abs_error": self.abs_error / self.elements,
            "relative_error": (self.abs_error / self.abs_reference)
            if self.abs_reference
            else (0.0 if not self.abs_error else float("inf")),
        }
        if self.kind == BOXES and self.detected_elements:
            found["detected_mean_abs_error"] = self.detected_error / self.detected_elements
        return found
