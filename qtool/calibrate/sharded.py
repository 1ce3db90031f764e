"""Calibration sharded over an existing distributed engine (Dask, Ray, a process pool).

Each shard of the data (some of a directory's files, say) is calibrated where the engine runs
it, and the statistics come back to be merged. Histogram counts and fixed-point sums add
exactly, so the merge equals a single-process calibration bit for bit, whatever the split or the
order results arrive in, as long as the engine computes a sample the same whatever else is in
its batch: LiteRT does; numpy's BLAS may round a row of a larger matrix product differently,
which can move a layer-input mean by one fixed-point unit (2^-24). The engine is anything with `submit(fn, *args)` returning futures that
have `.result()`: `dask.distributed.Client`, `concurrent.futures.ProcessPoolExecutor`...

    from dask.distributed import Client
    stats = calibrate_shards(Client("scheduler:8786"), "model.tflite", shard_files(data_dir, 8))
    stats.save("stats.json")        # then: qtool quantize model.tflite --statistics stats.json
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qtool.calibrate.collect import calibration_statistics
from qtool.calibrate.datasets import source_datasets
from qtool.calibrate.statistics import CalibrationStatistics
from qtool.errors import DataError
from qtool.model import load_model


def shard_files(directory: str | os.PathLike, shards: int) -> list[list[str]]:
    """The .npy/.npz files of a data directory in `shards` contiguous groups of about equal size."""
    files = sorted(str(p) for p in Path(directory).iterdir() if p.suffix in (".npy", ".npz"))
    if not files:
        raise DataError(f"{directory}: directory holds no .npy or .npz files")
    shards = max(1, min(shards, len(files)))
    size, extra = divmod(len(files), shards)
    groups, start = [], 0
    for k in range(shards):
        end = start + size + (k < extra)
        groups.append(files[start:end])
        start = end
    return groups


def calibrate_shard(model: str, sources: Sequence[str], engine: str = "auto") -> dict[str, Any]:
    """Runs on a worker: the JSON-ready statistics of one shard (plain data travels well)."""
    loaded = load_model(model)
    return calibration_statistics(loaded, source_datasets(loaded, list(sources)), engine).state()


def calibrate_shards(
    executor: Any, model: str | os.PathLike, shards: Sequence[Sequence[str]], engine: str = "auto"
) -> CalibrationStatistics:
    """Calibrate every shard on `executor` and merge the statistics (exactly)."""
    futures = [
        executor.submit(calibrate_shard, os.fspath(model), list(shard), engine) for shard in shards
    ]
    merged = None
    for future in futures:
        statistics = CalibrationStatistics.from_state(future.result())
        if merged is None:
            merged = statistics
        else:
            merged.merge(statistics)
    if merged is None:
        raise DataError("no shards to calibrate")
    return merged
