"""Whole float fixtures: the numpy engine agrees with LiteRT, batched and with observers."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.calibrate import (
    MinMaxObserver,
    activation_tensors,
    calibrate,
    load_dataset,
    model_inputs,
)
from qtool.errors import UnsupportedOpError
from qtool.model import load_model
from qtool.model.build import GraphBuilder
from qtool.prepare import prepare_float_model
from qtool.runtime import Engine, register_custom_op
from tests.conftest import DATA, MODELS, float_model_names
from tests.litert import run_litert_samples

FIXTURES = float_model_names()


def holdout(name: str, model) -> list[np.ndarray]:
    with np.load(DATA / f"{name}_holdout.npz") as data:
        return [data[spec.name] for spec in model_inputs(model)]


@pytest.mark.parametrize("name", FIXTURES)
def test_engine_matches_litert_on_fixture(name: str) -> None:
    path = MODELS / f"{name}.tflite"
    model = load_model(path)
    feeds = holdout(name, model)
    expected = run_litert_samples(path.read_bytes(), feeds)
    got = Engine(model).run(feeds)
    for e, g in zip(expected, got, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        if np.issubdtype(e.dtype, np.floating):
            err = np.max(np.abs(e.astype(np.float64) - g))
            assert err <= 1e-4 * max(np.max(np.abs(e)), 1e-30), f"{name}: max error {err}"
        else:
            np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("name", FIXTURES)
def test_batched_run_equals_one_by_one(name: str) -> None:
    model = load_model(MODELS / f"{name}.tflite")
    feeds = [f[:12] for f in holdout(name, model)]
    engine = Engine(model)
    batched = engine.run(feeds, chunk=12)
    single = engine.run(feeds, chunk=1)
    for b, s in zip(batched, single, strict=True):
        np.testing.assert_allclose(b, s, rtol=1e-5, atol=1e-6)


def test_observers_see_every_activation_and_memory_is_released() -> None:
    model = load_model(MODELS / "cnn.tflite")
    seen: dict[int, tuple] = {}
    engine = Engine(model)
    engine.run(holdout("cnn", model), observers=[lambda t, v: seen.setdefault(t, v.shape)])
    assert set(activation_tensors(model)) <= set(seen)
    freed = sum(len(step.frees) for step in engine.steps)
    assert freed >= len(model.subgraphs[0].operators) - len(model.subgraphs[0].outputs) - 1


def test_replace_hook_changes_downstream_values() -> None:
    model = load_model(MODELS / "mlp.tflite")
    feeds = holdout("mlp", model)
    engine = Engine(model)
    baseline = engine.run(feeds)[0]
    first_hidden = model.subgraphs[0].operators[0].outputs[0]
    zeroed = engine.run(feeds, replace=lambda t, v: np.zeros_like(v) if t == first_hidden else v)[0]
    assert not np.allclose(baseline, zeroed)
    assert np.allclose(zeroed, zeroed[0])  # every sample now sees the same hidden state


@pytest.mark.parametrize("name", FIXTURES)
def test_numpy_and_litert_calibration_ranges_agree(name: str) -> None:
    model = prepare_float_model(load_model(MODELS / f"{name}.tflite")).model
    dataset = load_dataset([str(DATA / f"{name}_calib.npz")], model_inputs(model))
    tensors = activation_tensors(model)
    by_numpy = calibrate(model, dataset, "numpy", MinMaxObserver(tensors)).ranges
    by_litert = calibrate(model, dataset, "litert", MinMaxObserver(tensors)).ranges
    assert by_numpy.keys() == by_litert.keys()
    for t, (lo, hi) in by_numpy.items():
        ref_lo, ref_hi = by_litert[t]
        scale = max(abs(ref_lo), abs(ref_hi), 1e-6)
        assert abs(lo - ref_lo) <= 1e-5 * scale and abs(hi - ref_hi) <= 1e-5 * scale, (
            f"{name} tensor {model.subgraphs[0].tensors[t].name}: numpy {lo, hi} "
            f"vs LiteRT {ref_lo, ref_hi}"
        )


def test_missing_kernel_error_names_op_and_how_to_register() -> None:
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    out = builder.custom("MyCustomOp", [x], [1, 4])
    model = builder.finish([out])
    with pytest.raises(UnsupportedOpError, match=r"operator 0 \(MyCustomOp\).*register_custom_op"):
        Engine(model)


def test_custom_op_registry() -> None:
    register_custom_op("TimesTwo", lambda ctx: ctx.inputs[0] * 2)
    builder = GraphBuilder()
    x = builder.input("x", [1, 3])
    out = builder.custom("TimesTwo", [x], [1, 3])
    model = builder.finish([out])
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(Engine(model).run([data])[0], data * 2)


def test_every_spec_op_has_a_kernel() -> None:
    from qtool.runtime.registry import builtin_kernels
    from qtool.spec import load_spec

    assert set(load_spec().ops) - set(builtin_kernels()) == set()
