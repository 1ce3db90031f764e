"""The audit of a 10 MB model stays far below a second (value checks are vectorised)."""

from __future__ import annotations

import time

from qtool.check import check_paths
from qtool.model import save_model
from tests.check.helpers import large_int8_model


def test_ten_megabyte_model_audits_quickly(tmp_path) -> None:
    path = tmp_path / "large.tflite"
    save_model(large_int8_model(), path)
    assert path.stat().st_size > 10_000_000
    start = time.perf_counter()
    (result,) = check_paths([path])
    elapsed = time.perf_counter() - start
    assert result.error is None and result.findings == []
    assert elapsed < 1.0, f"audit took {elapsed:.2f} s"
