"""The Dask recipe (docs/quantize.md: sharded calibration) measured: one model's 512 samples in
SHARDS files, calibrated on a local Dask cluster of one worker and of two (one process each),
against one `calibration_statistics` in this process; and the merge alone (reading the shards'
statistics back and adding them), the cost a scheduler pays per shard. The merged statistics
must equal the single process's bit for bit (as tests/test_sharded.py checks on fixtures).

    python -m bench.shards [MODEL]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.phases import many_samples
from bench.real_models import model_path
from qtool.calibrate.collect import calibration_statistics
from qtool.calibrate.datasets import source_datasets
from qtool.calibrate.sharded import calibrate_shard, calibrate_shards, shard_files
from qtool.calibrate.statistics import CalibrationStatistics
from qtool.model import load_model

SHARDS = 8
console = Console()


def _split(samples: np.ndarray, folder: Path) -> None:
    for k, part in enumerate(np.array_split(samples, SHARDS)):
        np.save(folder / f"shard_{k:02d}.npy", part)


def bench_shards(name: str = "face_landmark", profile: bool = True) -> None:
    """`profile`: Dask's worker profiler on (its default: a stack sample every 10 ms)."""
    import dask
    from dask.distributed import Client, LocalCluster

    dask.config.set({"distributed.worker.profile.enabled": profile})
    console.print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    model = str(model_path(name))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _split(np.load(many_samples(name)), folder)
        shards = shard_files(folder, SHARDS)
        started = time.perf_counter()
        loaded = load_model(model)
        files = [f for shard in shards for f in shard]
        alone = calibration_statistics(loaded, source_datasets(loaded, files))
        rows.append(("this process, one pass", time.perf_counter() - started))
        states = [calibrate_shard(model, shard) for shard in shards]
        started = time.perf_counter()
        merged = CalibrationStatistics.from_state(states[0])
        for state in states[1:]:
            merged.merge(CalibrationStatistics.from_state(state))
        merge = time.perf_counter() - started
        for workers in (1, 2):
            with (
                LocalCluster(
                    n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
                ) as cluster,
                Client(cluster) as client,
            ):
                client.run(lambda: None)  # workers up
                started = time.perf_counter()
                found = calibrate_shards(client, model, shards)
                rows.append((f"Dask, {workers} worker(s)", time.perf_counter() - started))
            if found.state() != alone.state():
                raise AssertionError("sharded statistics differ from one process's")
    table = Table(
        title=f"{name}, {sum(len(s) for s in shards)} files of 512 samples: calibration "
        f"statistics, wall seconds; merging {SHARDS} shards' statistics: {merge:.2f} s; "
        f"Dask's worker profiler {'on' if profile else 'off'}"
    )
    table.add_column("how")
    table.add_column("s", justify="right")
    table.add_column("vs one process", justify="right")
    for how, seconds in rows:
        table.add_row(how, f"{seconds:.2f}", f"{seconds / rows[0][1]:.2f}x")
    console.print(table)
    console.print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    for profiled in (True, False):
        bench_shards(*sys.argv[1:2], profile=profiled)
