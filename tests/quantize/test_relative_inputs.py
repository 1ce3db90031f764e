"""Float ops that need precision relative to each value (LOG, RSQRT, a divisor): the producers
of a tensor whose values an int8 grid rounds to zero stay float with a reason
(qtool/quantize/relative.py), judged on a small log-power front-end in LiteRT (builtin kernels
and XNNPACK) against the float model, in dB."""

from __future__ import annotations

import numpy as np
import pytest

import qtool
from qtool.model import model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.quantize import relative
from tests.quantize.graph_forms import Form, litert_sqnr

BINS = 16


def log_power_form(decades: float, samples: int = 48) -> Form:
    """A log-power spectrum as audio front-ends compute one: a signal whose loudness spans
    `decades` decades, a projection (the transform), its square (the power), a non-negative
    filterbank, a floor, LOG and a dB scale."""
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.input("signal", [1, 32])
    basis = np.cos(np.outer(np.arange(BINS) + 1, np.arange(32)) * np.pi / 32) / 4
    spectrum = b.fully_connected(x, basis, np.zeros(BINS), "spectrum")
    power = b.op(
        "MUL", [spectrum, spectrum], output_shape=[1, BINS], name="power", options_type="MulOptions"
    )
    bank = rng.uniform(0, 1, (8, BINS)) * (rng.uniform(0, 1, (8, BINS)) > 0.5)
    mel = b.fully_connected(power, bank, np.zeros(8), "mel")
    floor = b.constant("floor", np.array(1e-10, np.float32))
    floored = b.op("MAXIMUM", [mel, floor], output_shape=[1, 8], name="floored")
    log = b.op("LOG", [floored], output_shape=[1, 8], name="log")
    gain = b.constant("gain", np.array(10 / np.log(10), np.float32))
    db = b.op("MUL", [log, gain], output_shape=[1, 8], name="db", options_type="MulOptions")
    model = parse_model(model_to_bytes(b.finish([db])))
    n = samples + 32
    loudness = 10 ** rng.uniform(-decades, 0, (n, 1))
    data = (rng.standard_normal((n, 32)) * loudness).astype(np.float32)
    return Form(model, {"signal": data[:samples]}, {"signal": data[samples:]})


def _quantize(form: Form):
    return qtool.quantize_model(form.model, form.calibration, holdout=form.holdout)


def _float_ops(result) -> dict[str, str]:
    return {op["op"]: op["reason"] for op in result.report["float_ops"]}


@pytest.mark.parametrize("xnnpack", [False, True])
def test_log_power_spanning_decades_keeps_its_front_end_float(xnnpack: bool) -> None:
    form = log_power_form(decades=4)
    result = _quantize(form)
    reasons = [op["reason"] for op in result.report["float_ops"]]
    relative_reasons = [r for r in reasons if r.startswith("LOG (op 4) needs its input precise")]
    assert len(relative_reasons) == 4, reasons  # spectrum, power, mel, floor: LOG's input cone
    assert "round to zero on the int8 grid" in relative_reasons[0]
    feeds = [form.holdout["signal"]]
    kept = min(litert_sqnr(form.blob, result.model_bytes, feeds, xnnpack))
    assert kept > 35, kept


def test_without_the_rule_the_log_power_loses_its_quiet_values(monkeypatch) -> None:
    """The same model with the rule switched off: int8 rounds the quiet frames' power to zero,
    their logarithm to the floor, and the dB output's SQNR collapses."""
    form = log_power_form(decades=4)
    monkeypatch.setattr(relative, "ZERO_ROUNDED_SHARE", 1.0)
    result = _quantize(form)
    assert not any("precise" in op["reason"] for op in result.report["float_ops"])
    feeds = [form.holdout["signal"]]
    assert min(litert_sqnr(form.blob, result.model_bytes, feeds, False)) < 10


def test_log_of_a_resolved_range_keeps_its_producers_int8() -> None:
    """A signal whose loudness spans a fraction of a decade: the int8 grid resolves the LOG's
    input, nothing but LOG itself stays float."""
    form = log_power_form(decades=0.3)
    result = _quantize(form)
    reasons = [op["reason"] for op in result.report["float_ops"]]
    assert len(reasons) == 1 and "LOG" in reasons[0], reasons


def test_zero_rounded_share_counts_values_within_half_a_step() -> None:
    from qtool.calibrate.histogram import Histogram

    histogram = Histogram()
    values = np.array([[0.0, 0.0, 1e-4, 2e-4, 0.5, 1.0, 2.0, 2.55]], np.float32)
    histogram.add(values)
    # [0, 2.55] on int8: a step of 0.01, so 1e-4 and 2e-4 round to zero (exact zeros excluded).
    assert relative.zero_rounded_share(histogram, 0.0, 2.55) == pytest.approx(2 / 6)
