"""Sharded calibration from the command line: `qtool calibrate` on each shard of the data, then
`qtool quantize --statistics` on the files, writes the model calibrating on all of it writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from qtool import CalibrationStatistics
from tests.cli.helpers import run_script
from tests.conftest import DATA, MODELS


def test_statistics_of_shards_quantize_as_one_calibration(tmp_path: Path) -> None:
    shutil.copy(MODELS / "mlp.tflite", tmp_path / "mlp.tflite")
    with np.load(DATA / "mlp_calib.npz") as data:
        samples = data[data.files[0]]
    np.save(tmp_path / "shard_a.npy", samples[:20])
    np.save(tmp_path / "shard_b.npy", samples[20:])
    np.save(tmp_path / "all.npy", samples)
    np.save(tmp_path / "holdout.npy", samples[:1])

    def qtool(*args: str) -> None:
        result = run_script(tmp_path, *args, "-q")
        assert result.returncode == 0, (args, result.stderr)

    for name in ("shard_a", "shard_b", "all"):
        qtool("calibrate", "mlp.tflite", "--data", f"{name}.npy", "-o", f"{name}.json")
    merged = CalibrationStatistics.load(tmp_path / "shard_a.json")
    merged.merge(CalibrationStatistics.load(tmp_path / "shard_b.json"))
    assert merged.samples == 64
    assert merged.state() == CalibrationStatistics.load(tmp_path / "all.json").state()

    a_b = ("--statistics", "shard_a.json", "--statistics", "shard_b.json")
    b_a = ("--statistics", "shard_b.json", "--statistics", "shard_a.json")
    qtool("quantize", "mlp.tflite", *a_b, "-o", "a_b.tflite")
    qtool("quantize", "mlp.tflite", *b_a, "-o", "b_a.tflite")
    qtool("quantize", "mlp.tflite", "--statistics", "all.json", "-o", "all.tflite")
    written = (tmp_path / "all.tflite").read_bytes()
    assert (tmp_path / "a_b.tflite").read_bytes() == written
    assert (tmp_path / "b_a.tflite").read_bytes() == written

    # And the model calibrating on the data itself writes, where it fits on every sample: a
    # held-out set given, no evaluation fold is kept out of the calibration.
    qtool("quantize", "mlp.tflite", *a_b, "--calibration", "mse", "-o", "stats_mse.tflite")
    qtool(
        "quantize",
        "mlp.tflite",
        "--data",
        "all.npy",
        "--holdout",
        "holdout.npy",
        "--calibration",
        "mse",
        "-o",
        "data_mse.tflite",
    )
    from_data = (tmp_path / "data_mse.tflite").read_bytes()
    assert (tmp_path / "stats_mse.tflite").read_bytes() == from_data
