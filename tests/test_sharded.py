"""Calibration sharded over Dask workers merges to the single-process statistics, bit for bit."""

from __future__ import annotations

import distributed
import numpy as np
import pytest

import qtool
from qtool.calibrate.sharded import calibrate_shards, shard_files
from tests.conftest import DATA, MODELS

CNN = MODELS / "cnn.tflite"


@pytest.fixture(scope="module")
def data_directory(tmp_path_factory):
    """The cnn calibration samples as a directory of 8 .npy files (8 samples each)."""
    samples = np.load(DATA / "cnn_calib.npz")["serving_default_image:0"]
    folder = tmp_path_factory.mktemp("shards")
    for k in range(8):
        np.save(folder / f"part{k:02d}.npy", samples[8 * k : 8 * (k + 1)])
    return folder


def test_shards_split_the_files_contiguously(data_directory) -> None:
    shards = shard_files(data_directory, 3)
    assert [len(s) for s in shards] == [3, 3, 2]
    assert [f for shard in shards for f in shard] == sorted(
        str(p) for p in data_directory.iterdir()
    )


def test_dask_local_cluster_matches_one_process(data_directory) -> None:
    # LiteRT computes each sample the same whatever the batch (numpy's BLAS may round a row
    # differently in a larger matrix product, which moves a mean by one fixed-point unit).
    single = qtool.calibrate_model(CNN, str(data_directory), engine="litert")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        merged = calibrate_shards(client, CNN, shard_files(data_directory, 4), engine="litert")
    assert merged.state() == single.state()
    assert merged.samples == 64
    from_merge = qtool.quantize_model(CNN, statistics=merged, calibration="mse")
    from_data = qtool.quantize_model(  # statistics are of the model as it is: no equalization
        CNN,
        str(data_directory),
        calibration="mse",
        holdout=str(data_directory / "part00.npy"),
        equalize=False,
    )
    assert from_merge.model_bytes == from_data.model_bytes
