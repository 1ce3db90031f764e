"""Each output's kind from the graph and the values, and the measures that fit it."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model import model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.numerics.measures import KINDS, OutputMeasures, sample_sqnr, sigmoid
from qtool.numerics.metrics import sqnr_db
from qtool.quantize.accuracy import (
    BOXES,
    CLASSES,
    LITERT,
    LOGITS,
    MASK,
    PROBABILITY,
    REGRESSION,
    measure_outputs,
    output_kinds,
)


def detector_and_heads():
    """One model with every kind: a detector's scores [1, 6, 1] and boxes [1, 6, 4], a LOGISTIC
    probability [1, 1], a LOGISTIC mask [1, 4, 4, 1], SOFTMAX classes [1, 5], a regression."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", [1, 8])

    def dense(name: str, width: int) -> int:
        return b.fully_connected(x, rng.normal(size=(width, 8)), np.zeros(width, np.float32), name)

    def reshape(value: int, shape: list[int], name: str) -> int:
        return b.op(
            "RESHAPE", [value, b.constant(f"{name}/shape", np.array(shape, np.int32))],
            output_shape=shape, name=name,
        )  # fmt: skip

    scores = reshape(dense("scores_fc", 6), [1, 6, 1], "scores")
    boxes = reshape(dense("boxes_fc", 24), [1, 6, 4], "boxes")
    presence = b.op("LOGISTIC", [dense("presence_fc", 1)], output_shape=[1, 1], name="presence")
    mask_logits = reshape(dense("mask_fc", 16), [1, 4, 4, 1], "mask_logits")
    mask = b.op("LOGISTIC", [mask_logits], output_shape=[1, 4, 4, 1], name="mask")
    classes = b.op(
        "SOFTMAX", [dense("classes_fc", 5)], output_shape=[1, 5], name="classes",
        options_type="SoftmaxOptions", options={"beta": 1.0},
    )  # fmt: skip
    landmarks = dense("landmarks", 3)
    return parse_model(
        model_to_bytes(b.finish([scores, boxes, presence, mask, classes, landmarks]))
    )


def test_kinds_from_the_graph() -> None:
    assert output_kinds(detector_and_heads()) == [
        LOGITS, BOXES, PROBABILITY, MASK, CLASSES, REGRESSION,
    ]  # fmt: skip


def test_values_outside_a_probability_veto_the_kind() -> None:
    model = detector_and_heads()
    values = [
        np.zeros((2, *model.subgraphs[0].tensors[t].shape[1:])) for t in model.subgraphs[0].outputs
    ]
    values[2] = np.full((2, 1), 1.5)  # a "probability" of 1.5 is no probability
    assert output_kinds(model, 0, values)[2] == REGRESSION


def test_a_probability_near_zero_reads_by_its_decisions() -> None:
    """The wake-word case: values within 0.003 of 0 on a 1/256 grid, every decision right; the
    plain SQNR says the output is broken, the fitting one and the decisions that it is not."""
    reference = np.array([[0.001], [0.0005], [0.003], [0.002]])
    quantized = np.array([[0.00390625], [0.00390625], [0.0], [0.00390625]])
    meter = OutputMeasures(PROBABILITY, step=1 / 256)
    meter.add(reference, quantized)
    assert meter.sqnr_db < 0  # one grid step is larger than the signal
    assert meter.fitting_db > 40  # 0.002 of error, 0.5 from the threshold
    assert meter.values()["decision_agreement"] == 1.0
    assert meter.values()["max_abs_error"] == pytest.approx(0.00390625 - 0.0005)
    assert meter.floored()
    # Near the threshold the same error is what matters.
    near = OutputMeasures(PROBABILITY, step=1 / 256)
    near.add(np.array([[0.499], [0.501]]), np.array([[0.501], [0.499]]))
    assert near.values()["decision_agreement"] == 0.0 and near.fitting_db < 1
    assert not near.floored()


def test_mask_iou_logits_and_boxes_where_detected() -> None:
    mask = OutputMeasures(MASK)
    reference = np.array([[[0.9, 0.8], [0.1, 0.2]]])
    mask.add(reference, np.array([[[0.9, 0.4], [0.1, 0.6]]]))
    assert mask.values()["iou"] == pytest.approx(1 / 3)  # 1 pixel of 3 in either mask
    assert mask.values()["decision_agreement"] == 0.5
    logits = OutputMeasures(LOGITS)
    logits.add(np.array([[-300.0, 2.0]]), np.array([[-150.0, 1.8]]))
    # -300 vs -150 is no difference at all as a probability: only the detection counts.
    assert logits.values()["max_abs_error"] == pytest.approx(0.88080 - 0.85815, abs=1e-4)
    assert logits.sqnr_db < 10 < logits.fitting_db
    boxes = OutputMeasures(BOXES)
    boxes.add(
        np.array([[[0.0, 0.0], [5.0, 5.0]]]), np.array([[[1.0, 1.0], [5.5, 5.5]]]),
        detected=np.array([[False, True]]),
    )  # fmt: skip
    assert boxes.values()["mean_abs_error"] == pytest.approx(0.75)
    assert boxes.values()["detected_mean_abs_error"] == pytest.approx(0.5)
    assert boxes.values()["relative_error"] == pytest.approx(0.3)


def test_classes_top_k() -> None:
    classes = OutputMeasures(CLASSES)
    reference = np.eye(6)[[0, 1, 2, 3]] * 0.5 + 0.05
    quantized = reference.copy()
    quantized[0] = [0.1, 0.6, 0.1, 0.1, 0.05, 0.05]  # top-1 moved, still in the top 5
    classes.add(reference, quantized)
    assert classes.values() == {"top1_agreement": 0.75, "top5_agreement": 1.0}


def test_records_of_a_whole_model_add_up_by_chunks() -> None:
    model = detector_and_heads()
    rng = np.random.default_rng(1)
    shapes = [model.subgraphs[0].tensors[t].shape for t in model.subgraphs[0].outputs]
    reference = [rng.uniform(0.01, 0.99, (10, *s[1:])) for s in shapes]
    quantized = [r + rng.normal(0, 0.01, r.shape) for r in reference]
    records = measure_outputs(model, 0, reference, quantized, LITERT)
    assert [r.kind for r in records] == output_kinds(model)
    for record, want, got in zip(records, reference, quantized, strict=True):
        assert record.samples == 10 and record.measured_in == LITERT
        assert record.sqnr_db == pytest.approx(sqnr_db(want, got))
        per_sample = sample_sqnr(
            1 / (1 + np.exp(-want)) if record.kind == LOGITS else want,
            1 / (1 + np.exp(-got)) if record.kind == LOGITS else got,
            0.5 if record.kind in (PROBABILITY, MASK, LOGITS) else 0.0,
        )
        assert record.sample_min_db == pytest.approx(per_sample.min())
        assert record.sample_median_db == pytest.approx(np.median(per_sample))
        assert record.headline()
        assert record.to_dict()["kind"] == record.kind


@pytest.mark.parametrize("kind", KINDS)
def test_each_measure_is_its_definition_to_the_bit(kind) -> None:
    # add() computes each difference and square once: the sums are those of the definitions.
    rng = np.random.default_rng(4)
    want = rng.uniform(-3, 3, (6, 5, 4)).astype(np.float32)
    got = want + rng.normal(0, 0.05, want.shape).astype(np.float32)
    meter = OutputMeasures(kind)
    meter.add(want, got)
    ref, out = want.astype(np.float64), got.astype(np.float64)
    assert (meter.sqnr.signal, meter.sqnr.noise) == (np.sum(ref**2), np.sum((ref - out) ** 2))
    if kind == LOGITS:
        ref, out = sigmoid(ref), sigmoid(out)
    centre = 0.5 if kind in (PROBABILITY, MASK, LOGITS) else 0.0
    assert meter.fitting.signal == np.sum((ref - centre) ** 2)
    assert meter.fitting.noise == np.sum((ref - out) ** 2)
    np.testing.assert_array_equal(meter.per_sample[0], sample_sqnr(ref, out, centre))
    assert meter.largest_error == np.abs(ref - out).max()
    assert meter.abs_error == np.abs(ref - out).sum()
