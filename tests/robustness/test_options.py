"""The planning options of quantize and analyze given odd or wrong values (`tests/fuzz/option_cases.py`):
one `qtool: error:` line and exit 2 for a wrong one, a normal run for an odd but meaningful one.
The reproducers of what fuzzing these options found run by name; a sample of the other cases
runs too (all of them in `make fuzz`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qtool.errors import UsageError
from qtool.quantize import QuantizeOptions
from tests.conftest import DATA
from tests.fuzz.option_cases import CASES
from tests.fuzz.tasks import run_output_case
from tests.robustness.test_data import _quantize

FOUND = [
    "quantize --target-sqnr 'nan'",  # searched for a NaN target, then exit 1
    "quantize --target-sqnr 'inf'",
    "quantize --target-sqnr '-inf'",  # accepted as "reached"
    "quantize --target-sqnr '1e400'",
    "quantize --synthetic --seed -1",  # numpy's ValueError: internal error
]
SAMPLE = [case.name for case in CASES[::8] if case.name not in FOUND]


@pytest.mark.parametrize("name", FOUND + SAMPLE)
def test_option_values_fail_cleanly(name: str, tmp_path: Path) -> None:
    verdict = run_output_case(name, str(tmp_path), "option")
    assert verdict.failures == {}, verdict.failures


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_target_sqnr_must_be_finite(value: float) -> None:
    with pytest.raises(UsageError, match="target_sqnr must be a finite number of dB"):
        QuantizeOptions(target_sqnr=value)


def test_held_out_data_without_samples_is_refused(tmp_path: Path) -> None:
    """An empty --holdout was silently ignored: no accuracy estimate, exit 0."""
    empty = tmp_path / "empty.npy"
    np.save(empty, np.zeros((0, 32), np.float32))
    calibration = str(DATA / "mlp_calib.npz")
    code, lines = _quantize(tmp_path, "--data", calibration, "--holdout", str(empty))
    assert (code, lines) == (2, [f"qtool: error: {empty}: no held-out samples found"])
    assert not (tmp_path / "out.tflite").exists()
