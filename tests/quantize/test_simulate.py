"""Simulated quantization against LiteRT running the quantized model, and its parts."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from qtool.calibrate import Dataset
from qtool.model import load_model, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.quantize.simulate import Parts, Simulator
from qtool.runtime import Engine
from tests.conftest import float_model_names
from tests.litert import run_litert_samples
from tests.quantize.common import fixture_path, holdout_feeds, quantized

INT16 = (("activations", "int16"),)
ALGORITHMS = {"int8": (), "int16": INT16}
# The plan on which the known L2_NORMALIZATION defect below shows (the auto choice now takes bias
# correction on spec_ops in int16, where the defect does not flip a comparison).
UNCORRECTED_INT16 = (*INT16, ("bias_correction", False))
# The bar: simulation is used to choose, so it must predict LiteRT this closely.
AGREEMENT_DB = 0.5


@functools.cache
def float_outputs(name: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Held-out feeds and the float model's outputs on them in LiteRT."""
    feeds = holdout_feeds(name, load_model(fixture_path(name)))
    reference = run_litert_samples(fixture_path(name).read_bytes(), feeds, reference=False)
    return feeds, reference


# LiteRT's int8 L2_NORMALIZATION computes its inverse square root in fixed point: on spec_ops'
# held-out samples one of its 512 codes is one step below the rounded float value, and an int16
# comparison at +-0.2 downstream decides differently (0 of 512 with the float value). The
# simulation does not model that kernel; quantize's simulation check reports such a disagreement.
FIXED_POINT_L2_NORM = pytest.mark.xfail(
    strict=True,
    reason="known defect of qtool's simulation: it computes L2_NORMALIZATION's inverse square "
    "root in float where LiteRT's int8 kernel uses fixed point, so 1 code in 512 differs and a "
    "downstream int16 comparison flips. Users are not misled: every figure quantize prints is "
    "measured in LiteRT, and a simulation that disagrees with LiteRT is printed as a warning",
)


@pytest.mark.parametrize(
    ("name", "algorithm"),
    [
        *(
            pytest.param(name, ALGORITHMS[scheme], id=f"{name}-{scheme}")
            for name in float_model_names()
            for scheme in sorted(ALGORITHMS)
        ),
        pytest.param(
            "spec_ops",
            UNCORRECTED_INT16,
            marks=FIXED_POINT_L2_NORM,
            id="spec_ops-int16-no-bias-correction",
        ),
    ],
)
def test_simulated_sqnr_agrees_with_litert(name: str, algorithm: tuple) -> None:
    result = quantized(name, algorithm=algorithm)
    feeds, reference = float_outputs(name)
    litert = run_litert_samples(model_to_bytes(result.model), feeds, reference=False)
    simulated = Simulator(result.float_model, result.plans[0]).run(feeds)
    for r, lit, sim in zip(reference, litert, simulated, strict=True):
        assert sim.shape == lit.shape
        assert sqnr_db(r, sim) == pytest.approx(sqnr_db(r, lit), abs=AGREEMENT_DB)


@pytest.mark.parametrize("name", ["cnn", "mixed_ops", "spec_ops"])
def test_parts_of_the_simulation(name: str) -> None:
    result = quantized(name)
    feeds, _ = float_outputs(name)
    model, plan = result.float_model, result.plans[0]
    exact = Engine(model).run(feeds)
    nothing = Simulator(model, plan, Parts(weights=(), slots=())).run(feeds)
    for e, n in zip(exact, nothing, strict=True):
        np.testing.assert_array_equal(n, e)
    everything = Simulator(model, plan).run(feeds)
    listed = Parts(weights=set(plan.weights), slots={*plan.reads.values(), *plan.writes.values()})
    for a, b in zip(everything, Simulator(model, plan, listed).run(feeds), strict=True):
        np.testing.assert_array_equal(a, b)
    # Each part alone changes what the model computes.
    for part in (Parts(slots=()), Parts(weights=())):
        alone = Simulator(model, plan, part).run(feeds)
        assert any(not np.array_equal(a, e) for a, e in zip(alone, exact, strict=True))


def near_tie_model():
    """x >= 0.5 where x's int8 grid holds 0.4995: LiteRT's int8 comparison, which rescales
    both operands to multiples of 2^-8, calls them equal."""
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    half = builder.constant("half", np.float32(0.5))
    zero = builder.constant("zero", np.float32(0.0))
    above = builder.op(
        "GREATER_EQUAL", [x, half], output_shape=[1, 4], output_dtype=np.bool_, name="ge"
    )
    y = builder.op("SELECT_V2", [above, x, zero], output_shape=[1, 4], name="kept")
    return parse_model(model_to_bytes(builder.finish([y])))


@pytest.mark.parametrize("activations", ["int8", "int16"])
def test_comparisons_are_simulated_as_litert_computes_them(activations: str) -> None:
    model = near_tie_model()
    top = np.float32(0.4995 * 255 / 100)  # int8 scale top / 255: 0.4995 is the 100th step
    calibration = np.tile(np.array([0.0, 0.25, 0.75, top], np.float32), (16, 1))
    options = QuantizeOptions(calibration="minmax", activations=activations)
    result = quantize_loaded(model, Dataset.from_arrays([calibration], "ties"), options)
    x = np.array([[0.4995, 0.4996, 0.5, 0.3]], np.float32).repeat(4, axis=0)
    litert = run_litert_samples(model_to_bytes(result.model), [x], reference=False)[0]
    simulated = Simulator(result.float_model, result.plans[0]).run([x])[0]
    np.testing.assert_allclose(simulated, litert, rtol=0, atol=1e-6)
    if activations == "int8":
        assert litert[0, 0] > 0.49  # the near-tie kept: a float comparison would drop it
