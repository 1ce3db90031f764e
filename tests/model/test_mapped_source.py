"""A large model file is read into a private mapped copy (qtool.model.source): the user's file
may change or vanish afterwards without touching the model, a copy that comes short is one
error, the heap is the fallback without a temporary directory, and writing the model for LiteRT
gives the pages it read back (the peak of a large model's run)."""

from __future__ import annotations

import mmap
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from qtool.calibrate import Dataset
from qtool.errors import ModelError
from qtool.model import load_model, model_to_bytes, save_model
from qtool.model import source as source_module
from qtool.model.temporary import TemporaryModelFile
from qtool.quantize import QuantizeOptions, quantize_loaded
from tests.model.test_model_in_place import WIDTH, fc_stack

LAYERS = 64  # 64 layers of 64 x 64 float weights: 1 MiB, mapped with the threshold at 0


@pytest.fixture
def mapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_module, "MAPPED_SOURCE_BYTES", 0)


def _written(folder: Path) -> Path:
    path = folder / "stack.tflite"
    save_model(fc_stack(LAYERS), path)
    return path


def _quantized(model) -> bytes:
    samples = np.random.default_rng(3).normal(size=(8, WIDTH)).astype(np.float32)
    options = QuantizeOptions(calibration="minmax", bias_correction=False)
    return model_to_bytes(quantize_loaded(model, Dataset.from_arrays([samples]), options).model)


@pytest.mark.usefixtures("mapped")
def test_the_users_file_changing_after_the_read_does_not_change_the_model(tmp_path: Path) -> None:
    path = _written(tmp_path)
    expected = _quantized(load_model(path))
    model = load_model(path)
    assert isinstance(model.source_data, mmap.mmap)
    weights = [b.data.copy() for b in model.buffers if b.data is not None]
    with open(path, "r+b") as handle:  # rewritten, then cut short, then gone
        handle.write(os.urandom(path.stat().st_size))
    os.truncate(path, 128)
    path.unlink()
    assert all(
        np.array_equal(kept, b.data)
        for kept, b in zip(weights, [b for b in model.buffers if b.data is not None], strict=True)
    )
    assert _quantized(model) == expected


def test_a_mapped_model_quantizes_to_the_bytes_a_read_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _written(tmp_path)
    read = load_model(path)
    assert isinstance(read.source_data, bytes)
    monkeypatch.setattr(source_module, "MAPPED_SOURCE_BYTES", 0)
    mapped = load_model(path)
    assert isinstance(mapped.source_data, mmap.mmap)
    assert bytes(mapped.source_data) == read.source_data
    assert _quantized(mapped) == _quantized(read)


@pytest.mark.usefixtures("mapped")
def test_a_copy_that_comes_short_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _written(tmp_path)
    size = path.stat().st_size
    monkeypatch.setattr(source_module, "_copy", lambda source, target: size - 100)
    with pytest.raises(ModelError, match=f"changed while it was read \\({size:,} bytes, then"):
        load_model(path)


@pytest.mark.usefixtures("mapped")
def test_without_a_temporary_directory_the_model_is_read_into_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _written(tmp_path)

    def refused(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    model = load_model(path)
    assert isinstance(model.source_data, bytes) and model.source_data == path.read_bytes()


@pytest.mark.usefixtures("mapped")
def test_a_full_temporary_directory_falls_back_to_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _written(tmp_path)

    def full(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(source_module, "_copy", full)
    model = load_model(path)
    assert isinstance(model.source_data, bytes) and model.source_data == path.read_bytes()


LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="only Linux shows a mapping's resident pages (/proc/self/smaps), so they cannot be "
    "counted here; qtool gives a large model's read pages back the same way wherever Python's "
    "mmap has madvise (elsewhere they stay resident: about 1x the model more at its peak)",
)


def _all_weights_read(model) -> int:
    """Read every weight of `model` (all of its mapping's pages resident, checked) and return
    the address of its largest buffer."""
    largest = max((b.data for b in model.buffers if b.data is not None), key=len)
    address = largest.__array_interface__["data"][0]
    assert np.isfinite(sum(float(b.data.sum()) for b in model.buffers if b.data is not None))
    assert _resident_kib(address) * 1024 >= len(model.source_data) * 0.9
    return address


def _resident_kib(address: int) -> int:
    """Rss of the mapping of this process that holds `address` (/proc/self/smaps)."""
    with open("/proc/self/smaps") as smaps:
        inside = False
        for line in smaps:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                start, end = (int(bound, 16) for bound in head.split("-"))
                inside = start <= address < end
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError("no mapping holds the address")


@LINUX_ONLY
@pytest.mark.usefixtures("mapped")
def test_writing_the_model_for_litert_gives_its_read_pages_back(tmp_path: Path) -> None:
    model = load_model(_written(tmp_path))
    address = _all_weights_read(model)
    in_file = TemporaryModelFile(model)
    try:
        assert _resident_kib(address) <= 64  # from ~1 MiB: the pages are the file's cache again
        written = load_model(in_file.path, validate=False).buffers
        assert [bytes(b.data) for b in written if b.nbytes] == [
            bytes(b.data) for b in model.buffers if b.nbytes
        ]  # and the pages read again are the same bytes
    finally:
        in_file.close()


@LINUX_ONLY
@pytest.mark.usefixtures("mapped")
def test_a_plan_gives_back_the_pages_of_the_weights_it_quantized(tmp_path: Path) -> None:
    # Each candidate plan of a search reads every float weight: kept resident, they were a
    # model's size beside the calibration's XNNPACK copy (300 MB stack: 1,001 -> 808 MiB).
    from qtool.quantize.quantizer import calibrate_loaded

    model = load_model(_written(tmp_path))
    samples = np.random.default_rng(4).normal(size=(16, WIDTH)).astype(np.float32)
    options = QuantizeOptions(calibration="minmax", bias_correction=True)
    calibrated = calibrate_loaded(model, Dataset.from_arrays([samples]), options)
    planner = calibrated.planners[0]
    address = _all_weights_read(planner.model)
    plan = planner.plan(calibrated.collected[0].statistics, calibrated.start)
    assert len(plan.weights) == LAYERS
    assert _resident_kib(address) <= 64
