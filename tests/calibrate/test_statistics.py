"""Calibration statistics of a whole model: exact merging of shards, files, fingerprints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qtool.calibrate import activation_tensors, load_dataset, model_inputs
from qtool.calibrate.statistics import (
    CalibrationStatistics,
    corrected_inputs,
    model_fingerprint,
    new_subgraph_statistics,
)
from qtool.errors import DataError
from qtool.model import load_model
from qtool.runtime import Engine
from tests.conftest import DATA, MODELS


def recorded(name: str) -> tuple:
    """A fixture model and every activation it computes on its calibration samples."""
    model = load_model(MODELS / f"{name}.tflite")
    (samples,) = next(
        load_dataset([str(DATA / f"{name}_calib.npz")], model_inputs(model)).iter_chunks(24)
    )
    chunks: dict[int, list[np.ndarray]] = {}
    Engine(model).run([samples], observers=[lambda t, v: chunks.setdefault(t, []).append(v.copy())])
    return model, {t: np.concatenate(parts) for t, parts in chunks.items()}


def statistics_of(model, values: dict[int, np.ndarray], rows: slice) -> CalibrationStatistics:
    stats = new_subgraph_statistics(model, 0, activation_tensors(model), batched=True)
    for t, value in values.items():
        stats(t, value[rows])
    stats.samples = len(range(*rows.indices(24)))
    return CalibrationStatistics(model_fingerprint(model), {0: stats})


def pooled_mean(stats, t: int, value: np.ndarray) -> np.ndarray:
    """The mean over samples of each element, pooled over its class of positions where the
    statistics sum the tensor per class."""
    mean = value.mean(axis=0, dtype=np.float64)
    classes = stats.means.classes.get(t)
    if classes is None:
        return mean
    per_position = mean.reshape(-1, classes.channels)
    pooled = np.zeros((classes.count, classes.channels))
    np.add.at(pooled, classes.of_position, per_position)
    return classes.expand(pooled / classes.sizes[:, None]).reshape(mean.shape)


def test_shards_merge_into_the_single_run_in_any_order(tmp_path: Path) -> None:
    model, values = recorded("cnn")
    single = statistics_of(model, values, slice(0, 24))
    shards = [slice(0, 5), slice(5, 6), slice(6, 17), slice(17, 24)]
    for order in ([0, 1, 2, 3], [3, 1, 0, 2]):
        merged = None
        for i in order:
            path = tmp_path / f"shard{i}.json"
            statistics_of(model, values, shards[i]).save(path)  # shards travel as files
            loaded = CalibrationStatistics.load(path)
            if merged is None:
                merged = loaded
            else:
                merged.merge(loaded)
        assert merged.state() == single.state()
    assert merged.samples == 24
    stats = merged.subgraphs[0]
    # The means bias correction reads: the inputs of the layers with weights, exactly averaged.
    assert sorted(stats.means.summed) == corrected_inputs(model, 0) != []
    for t in corrected_inputs(model, 0):
        np.testing.assert_allclose(stats.means.mean(t), pooled_mean(stats, t, values[t]), atol=1e-6)
    assert stats.ranges() == {
        t: (float(v.min()), float(v.max())) for t, v in values.items() if t in stats.ranges()
    }


def test_statistics_of_another_model_are_refused() -> None:
    cnn, cnn_values = recorded("cnn")
    mlp, mlp_values = recorded("mlp")
    assert model_fingerprint(cnn) != model_fingerprint(mlp)
    mine = statistics_of(cnn, cnn_values, slice(0, 24))
    with pytest.raises(DataError, match="different models"):
        mine.merge(statistics_of(mlp, mlp_values, slice(0, 24)))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON calibration statistics"),
        (json.dumps({"format": "something else"}), "not a qtool calibration statistics file"),
        (
            json.dumps({"format": "qtool-calibration-statistics", "version": 99}),
            "version 99 is not supported",
        ),
        (
            json.dumps(
                {
                    "format": "qtool-calibration-statistics",
                    "version": 1,
                    "fingerprint": "x",
                    "subgraphs": {"0": {"samples": 3}},
                }
            ),
            "malformed calibration statistics",
        ),
    ],
)
def test_bad_statistics_files_are_data_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "stats.json"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        CalibrationStatistics.load(path)
    with pytest.raises(DataError, match="cannot read"):
        CalibrationStatistics.load(tmp_path / "missing.json")
