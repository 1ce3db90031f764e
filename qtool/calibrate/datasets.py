"""Calibration data: .npy, .npz, directories of them, Python generators, or synthetic samples.

Whatever the source, data is normalised to a list of `Batch`es, each holding one array per model
input with shape (N, *sample_shape): the sample shape is the input's declared shape without its
leading batch-1 dimension (or the whole declared shape when that dimension is not 1).
"""

from __future__ import annotations

import importlib
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qtool.errors import DataError, UsageError


@dataclass(frozen=True)
class InputSpec:
    """One model input as calibration data must match it."""

    name: str  # the tensor name in the model
    aliases: tuple[str, ...]  # signature name, name without the ":0" suffix...
    sample_shape: tuple[int, ...]
    dtype: np.dtype

    def matches(self, key: str) -> bool:
        return key == self.name or key in self.aliases


Batch = list[np.ndarray]  # one array per model input, shape (N, *sample_shape)


@dataclass
class Dataset:
    """Calibration samples, read lazily: each pass reads the sources again, a batch at a time,
    so memory holds one engine chunk rather than the whole dataset."""

    read: Callable[[], Iterable[Batch]]
    source: str
    synthetic: bool = False
    limit: int | None = None  # stop after this many samples
    size_hint: int | None = None  # samples a pass yields, when known without reading the data

    @property
    def expected_samples(self) -> int | None:
        if self.size_hint is None:
            return self.limit
        return self.size_hint if self.limit is None else min(self.size_hint, self.limit)

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray], source: str = "arrays") -> Dataset:
        """Samples already in memory: one array per model input, shape (N, *sample_shape)."""
        batch = [np.asarray(a) for a in arrays]
        return cls(read=lambda: [batch], source=source, size_hint=batch[0].shape[0])

    def iter_chunks(self, size: int) -> Iterator[Batch]:
        """The samples cut into chunks of at most `size` (the engine's batch), up to `limit`."""
        pending: list[Batch] = []
        count = total = 0
        for batch in self.read():
            start, n = 0, batch[0].shape[0]
            while start < n:
                if self.limit is not None and total == self.limit:
                    break
                take = min(size - count, n - start)
                if self.limit is not None:
                    take = min(take, self.limit - total)
                pending.append([a[start : start + take] for a in batch])
                count, total, start = count + take, total + take, start + take
                if count == size:
                    yield _concat(pending)
                    pending, count = [], 0
            if self.limit is not None and total == self.limit:
                break
        if pending:
            yield _concat(pending)


def _concat(parts: list[Batch]) -> Batch:
    if len(parts) == 1:
        return parts[0]
    return [np.concatenate(arrays) for arrays in zip(*parts, strict=True)]


def load_dataset(
    sources: Sequence[str], inputs: Sequence[InputSpec], limit: int | None = None
) -> Dataset:
    """The `--data` sources as a lazy dataset; missing sources fail now, bad content when read."""
    for source in sources:
        _check_exists(source)

    def read() -> Iterator[Batch]:
        for source in sources:
            yield from _read_source(source, inputs)

    counts = [_count_samples(source, inputs) for source in sources]
    known = None if None in counts else sum(counts)
    return Dataset(read=read, source=", ".join(sources), limit=limit, size_hint=known)


def synthetic_dataset(inputs: Sequence[InputSpec], samples: int, seed: int) -> Dataset:
    """Random samples: standard normal for float inputs, small integers otherwise."""

    def read() -> list[Batch]:
        rng = np.random.default_rng(seed)
        batch = []
        for spec in inputs:
            shape = (samples, *spec.sample_shape)
            if np.issubdtype(spec.dtype, np.floating):
                batch.append(rng.standard_normal(shape).astype(spec.dtype))
            elif spec.dtype == np.bool_:
                batch.append(rng.integers(0, 2, shape).astype(np.bool_))
            else:
                batch.append(rng.integers(0, 10, shape).astype(spec.dtype))
        return [batch]

    return Dataset(read=read, source="synthetic", synthetic=True, size_hint=samples)


def _count_samples(source: str, inputs: Sequence[InputSpec]) -> int | None:
    """Samples in a file source, from the .npy headers alone; None when it cannot tell."""
    if _is_generator(source):
        return None
    path = Path(source)
    files = (
        sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz"))
        if path.is_dir()
        else [path]
    )
    total = 0
    for file in files:
        shape = _first_array_shape(file)
        if shape is None:
            return None
        sample = tuple(inputs[0].sample_shape)
        total += 1 if tuple(shape) == sample else (shape[0] if shape else 1)
    return total


def _first_array_shape(path: Path) -> tuple[int, ...] | None:
    try:
        if path.suffix == ".npy":
            with open(path, "rb") as handle:
                return _npy_header_shape(handle)
        with zipfile.ZipFile(path) as archive:
            names = sorted(n for n in archive.namelist() if n.endswith(".npy"))
            if not names:
                return None
            with archive.open(names[0]) as handle:
                return _npy_header_shape(handle)
    except (OSError, ValueError, zipfile.BadZipFile):
        return None  # reading the data will say what is wrong


def _npy_header_shape(handle) -> tuple[int, ...]:
    version = np.lib.format.read_magic(handle)
    reader = {
        (1, 0): np.lib.format.read_array_header_1_0,
        (2, 0): np.lib.format.read_array_header_2_0,
    }.get(version)
    if reader is None:
        raise ValueError(f"unknown .npy version {version}")
    return reader(handle)[0]


def _is_generator(source: str) -> bool:
    return ":" in source and not Path(source).exists() and not Path(source).suffix


def _check_exists(source: str) -> None:
    if not _is_generator(source) and not Path(source).exists():
        raise DataError(f"{source}: no such file or directory")


def _read_source(source: str, inputs: Sequence[InputSpec]) -> Iterator[Batch]:
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz"))
        if not files:
            raise DataError(f"{source}: directory holds no .npy or .npz files")
        for file in files:
            yield from _read_file(file, inputs)
    elif _is_generator(source):
        yield from _read_generator(source, inputs)
    else:
        yield from _read_file(path, inputs)


def _read_file(path: Path, inputs: Sequence[InputSpec]) -> Iterator[Batch]:
    with open(path, "rb") as handle:
        signature = handle.read(6)
    # numpy falls back to unpickling unknown files; say what the file is not instead.
    if not signature.startswith((b"\x93NUMPY", b"PK\x03\x04", b"PK\x05\x06")):
        raise DataError(f"{path}: not a .npy or .npz file")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: not a readable .npy/.npz file ({exc})") from None
    if isinstance(loaded, np.ndarray):
        if len(inputs) != 1:
            raise DataError(
                f"{path}: a .npy holds one array but the model has {len(inputs)} "
                "inputs; use a .npz keyed by input name"
            )
        yield [_as_samples(loaded, inputs[0], str(path))]
        return
    with loaded:
        arrays = {key: loaded[key] for key in loaded.files}
    yield _match_named(arrays, inputs, str(path))


def _match_named(arrays: dict[str, np.ndarray], inputs: Sequence[InputSpec], where: str) -> Batch:
    """Arrays keyed by input name, or arr_0, arr_1... in input order."""
    positional = all(key.startswith("arr_") for key in arrays)
    batch = []
    for position, spec in enumerate(inputs):
        if positional:
            key = f"arr_{position}"
            found = key if key in arrays else None
        else:
            found = next((key for key in arrays if spec.matches(key)), None)
        if found is None:
            known = ", ".join(sorted(arrays))
            raise DataError(
                f"{where}: no data for input {spec.name!r} (keys: {known}; "
                f"use the input names or arr_0..arr_{len(inputs) - 1})"
            )
        batch.append(_as_samples(arrays[found], spec, f"{where}[{found}]"))
    _same_count(batch, where)
    return batch


def _same_count(batch: Batch, where: str) -> None:
    counts = {a.shape[0] for a in batch}
    if len(counts) > 1:
        raise DataError(f"{where}: inputs have different sample counts {sorted(counts)}")


def _as_samples(array: Any, spec: InputSpec, where: str) -> np.ndarray:
    """Accept one sample (sample shape), a declared-shape sample, or N samples; check values."""
    array = np.asarray(array)
    sample = tuple(spec.sample_shape)
    if array.shape == sample:
        array = array[None]
    elif array.shape[1:] != sample:
        expected = "(N, " + ", ".join(map(str, sample)) + ")" if sample else "(N,)"
        raise DataError(
            f"{where}: input {spec.name!r} expects samples of shape {list(sample)}, "
            f"i.e. data of shape {expected}; got {list(array.shape)}"
        )
    if array.dtype.kind not in "fiub":
        raise DataError(f"{where}: input {spec.name!r} has non-numeric data ({array.dtype})")
    if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
        bad = int(np.count_nonzero(~np.isfinite(array)))
        raise DataError(f"{where}: input {spec.name!r} contains {bad} NaN/inf values")
    if array.dtype != spec.dtype:
        if not np.can_cast(array.dtype, spec.dtype, casting="same_kind"):
            raise DataError(
                f"{where}: input {spec.name!r} expects {spec.dtype} data, got {array.dtype}"
            )
        array = array.astype(spec.dtype)
    return array


def _read_generator(source: str, inputs: Sequence[InputSpec]) -> Iterator[Batch]:
    """`module:function`, yielding per sample a list (input order) or a dict (name -> array)."""
    module_name, _, function_name = source.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--data {source}: cannot load generator ({exc})") from None
    try:
        samples = iter(function())
    except TypeError as exc:
        raise DataError(f"--data {source}: the function must return an iterable ({exc})") from None
    for number, sample in enumerate(samples):
        where = f"{source} sample {number}"
        if isinstance(sample, dict):
            batch = _match_named(sample, inputs, where)
        else:
            values = list(sample) if isinstance(sample, list | tuple) else [sample]
            if len(values) != len(inputs):
                raise DataError(f"{where}: {len(values)} arrays for {len(inputs)} inputs")
            batch = [_as_samples(v, spec, where) for v, spec in zip(values, inputs, strict=True)]
            _same_count(batch, where)
        yield batch
