"""Range observers: global min/max, and mergeable, serialisable statistics for sharding."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qtool.calibrate import (
    InputSpec,
    MinMaxObserver,
    activation_tensors,
    load_dataset,
    model_inputs,
)
from qtool.calibrate.observers import MinMaxObserver as Observer
from qtool.errors import DataError
from qtool.model import load_model
from qtool.runtime import Engine
from tests.conftest import DATA, MODELS


def test_min_max_is_global_not_a_moving_average() -> None:
    observer = MinMaxObserver([7])
    for value in (np.array([0.0, 1.0]), np.array([-5.0, 0.5]), np.array([0.1, 0.2])):
        observer(7, value)
    observer(3, np.array([100.0]))  # not observed
    assert observer.ranges() == {7: (-5.0, 1.0)}


def test_sharded_calibration_merges_to_the_same_ranges() -> None:
    model = load_model(MODELS / "cnn.tflite")
    dataset = load_dataset([str(DATA / "cnn_calib.npz")], model_inputs(model))
    (samples,) = next(dataset.iter_chunks(64))
    tensors = activation_tensors(model)
    engine = Engine(model)
    whole = MinMaxObserver(tensors)
    shards = []
    for part in np.array_split(samples, 3):
        shard = MinMaxObserver(tensors)
        engine.run([part], observers=[shard, whole])
        # Each shard travels as JSON, as it would between machines.
        shards.append(Observer.from_state(json.loads(json.dumps(shard.state()))))
    merged = shards[0]
    for shard in shards[1:]:
        merged.merge(shard)
    assert merged.ranges() == whole.ranges()
    # One pass over all samples gives the same ranges up to summation order in the kernels.
    single = MinMaxObserver(tensors)
    engine.run([samples], observers=[single])
    for t, (low, high) in single.ranges().items():
        assert merged.ranges()[t] == pytest.approx((low, high), rel=1e-5, abs=1e-6)


def test_datasets_are_read_lazily_and_stop_at_the_limit(tmp_path) -> None:
    spec = InputSpec("x", (), (4,), np.dtype(np.float32))
    for i in range(10):
        np.save(tmp_path / f"{i:02d}.npy", np.full((3, 4), i, np.float32))
    (tmp_path / "99.npy").write_bytes(b"not numpy")  # only a full pass reaches it
    dataset = load_dataset([str(tmp_path)], [spec], limit=7)
    chunks = list(dataset.iter_chunks(4))
    assert [c[0].shape[0] for c in chunks] == [4, 3]
    assert np.concatenate([c[0] for c in chunks])[:, 0].tolist() == [0, 0, 0, 1, 1, 1, 2]
    with pytest.raises(DataError, match=r"99\.npy"):
        list(load_dataset([str(tmp_path)], [spec]).iter_chunks(4))


def test_expected_samples_from_headers_without_reading_data(tmp_path) -> None:
    spec = InputSpec("x", (), (4,), np.dtype(np.float32))
    np.save(tmp_path / "a.npy", np.zeros((5, 4), np.float32))
    np.savez(tmp_path / "b.npz", x=np.zeros((6, 4), np.float32))
    (tmp_path / "dir").mkdir()
    for i in range(3):
        np.save(tmp_path / "dir" / f"{i}.npy", np.zeros(4, np.float32))  # one sample each
    sources = [str(tmp_path / "a.npy"), str(tmp_path / "b.npz"), str(tmp_path / "dir")]
    assert load_dataset(sources, [spec]).expected_samples == 14
    assert load_dataset(sources, [spec], limit=9).expected_samples == 9
    assert load_dataset(["json:loads"], [spec]).expected_samples is None
