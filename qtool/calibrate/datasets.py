"""Calibration data as lazy datasets, from whatever the user holds: `--data` sources (.npy,
.npz, directories of them, Python generators), numpy arrays, dicts and lists of arrays, iterables
and generator functions (like TensorFlow's `representative_dataset`), or synthetic samples.

Whatever the source, data is normalised to a list of `Batch`es, each holding one array per model
input with shape (N, *sample_shape): the sample shape is the input's declared shape without its
leading batch-1 dimension (or the whole declared shape when that dimension is not 1). Reading
the files and running the generators is `sample_sources.py`'s business.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qtool.calibrate.inputs import Batch, InputSpec, entry_subgraphs, model_inputs
from qtool.calibrate.sample_sources import (
    READ_CHUNK_BYTES,
    check_exists,
    count_samples,
    generated_batches,
    match_named,
    read_source,
)
from qtool.errors import UsageError
from qtool.model import Model


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
        """The samples a pass will yield when known without reading the data (size_hint capped at
        limit, else limit); None when unknown."""
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
        check_exists(source)

    def read() -> Iterator[Batch]:
        for source in sources:
            yield from read_source(source, inputs)

    counts = [count_samples(source, inputs) for source in sources]
    known = None if None in counts else sum(counts)
    return Dataset(read=read, source=", ".join(sources), limit=limit, size_hint=known)


def synthetic_dataset(inputs: Sequence[InputSpec], samples: int, seed: int) -> Dataset:
    """Random samples: standard normal for float inputs, small integers otherwise; made a chunk
    of at most READ_CHUNK_BYTES at a time (float64 draws included), never all at once."""
    if seed < 0:  # numpy's generators take none
        raise UsageError(f"seed must be a non-negative integer, not {seed}")
    sample_bytes = sum(8 * math.prod(spec.sample_shape) for spec in inputs)
    rows = max(1, READ_CHUNK_BYTES // max(sample_bytes, 1))

    def read() -> Iterator[Batch]:
        rng = np.random.default_rng(seed)
        for start in range(0, samples, rows):
            count = min(rows, samples - start)
            batch = []
            for spec in inputs:
                shape = (count, *spec.sample_shape)
                if np.issubdtype(spec.dtype, np.floating):
                    batch.append(rng.standard_normal(shape).astype(spec.dtype))
                elif spec.dtype == np.bool_:
                    batch.append(rng.integers(0, 2, shape).astype(np.bool_))
                else:
                    batch.append(rng.integers(0, 10, shape).astype(spec.dtype))
            yield batch

    return Dataset(read=read, source="synthetic", synthetic=True, size_hint=samples)


def iterable_dataset(
    make: Callable[[], Iterable[Any]],
    inputs: Sequence[InputSpec],
    source: str,
    limit: int | None = None,
) -> Dataset:
    """Samples from Python: `make()` returns an iterable of samples (TensorFlow's
    `representative_dataset` is such a function), each a list of arrays in input order, a dict
    keyed by input name, or one array for a one-input model; the batch axis is optional."""

    def read() -> Iterator[Batch]:
        return generated_batches(make, inputs, source, source, source)

    return Dataset(read=read, source=source, limit=limit)


def named_arrays_dataset(
    arrays: dict[str, Any], inputs: Sequence[InputSpec], source: str, limit: int | None = None
) -> Dataset:
    """Samples held in memory: arrays (N, *sample_shape) keyed by input name or arr_0, arr_1..."""
    batch = match_named(arrays, inputs, source)
    return Dataset(read=lambda: [batch], source=source, limit=limit, size_hint=batch[0].shape[0])


class _Replayed:
    """A one-shot iterator read once, lazily: each pass replays the samples read so far and
    reads on from the iterator only as far as the pass goes (a dataset's `limit` stops it)."""

    def __init__(self, iterator: Iterator[Any]) -> None:
        self.iterator = iterator
        self.seen: list[Any] = []
        self.exhausted = False

    def __call__(self) -> Iterator[Any]:
        position = 0
        while True:
            if position < len(self.seen):
                yield self.seen[position]
            elif self.exhausted:
                return
            else:
                try:
                    sample = next(self.iterator)
                except StopIteration:
                    self.exhausted = True
                    return
                self.seen.append(sample)
                yield sample
            position += 1


def iterator_dataset(
    iterator: Iterator[Any], inputs: Sequence[InputSpec], source: str, limit: int | None = None
) -> Dataset:
    """Samples from a one-shot iterator (a generator object): read only as far as the passes
    go, at most `limit` samples, and kept for the passes after the first."""
    return iterable_dataset(_Replayed(iterator), inputs, source, limit)


def as_dataset(data: Any, inputs: Sequence[InputSpec], limit: int | None = None) -> Dataset:
    """Data in any form the Python API takes, as a Dataset of `inputs`: a path or list of
    paths (as `--data` takes them), a numpy array (one input, samples along axis 0), a dict of
    arrays keyed by input name, a list of arrays (one per input), a generator function or an
    iterable of samples, or a Dataset (returned as is)."""
    if isinstance(data, Dataset):
        return data
    if isinstance(data, str | os.PathLike):
        return load_dataset([os.fspath(data)], inputs, limit=limit)
    if isinstance(data, Sequence) and data and all(isinstance(d, str | os.PathLike) for d in data):
        return load_dataset([os.fspath(d) for d in data], inputs, limit=limit)
    if isinstance(data, np.ndarray):
        return named_arrays_dataset({"arr_0": data}, inputs, "array", limit)
    if isinstance(data, Mapping):
        return named_arrays_dataset(dict(data), inputs, "dict of arrays", limit)
    if (
        isinstance(data, list | tuple)
        and len(data) == len(inputs)
        and all(isinstance(d, np.ndarray) for d in data)
        and len(inputs) > 1
    ):
        arrays = {f"arr_{i}": d for i, d in enumerate(data)}
        return named_arrays_dataset(arrays, inputs, "list of arrays", limit)
    if callable(data):
        return iterable_dataset(data, inputs, getattr(data, "__name__", "generator"), limit)
    if isinstance(data, Iterator):  # one-shot (a generator object): read once, up to `limit`
        return iterator_dataset(data, inputs, type(data).__name__, limit)
    if isinstance(data, Iterable):
        return iterable_dataset(lambda: data, inputs, "iterable", limit)
    raise UsageError(f"cannot use a {type(data).__name__} as calibration data")


def entry_data(model: Model, data: Any) -> dict[int, Any]:
    """The Python API's data per entry subgraph: one source (any form `as_dataset` takes) for a
    model with one entry point, or a dict keyed by signature key."""
    entries = entry_subgraphs(model)
    by_key = {key: s for s, key in entries.items() if key is not None}
    if len(entries) > 1:
        if not (isinstance(data, Mapping) and set(data) <= set(by_key)):
            raise UsageError(
                f"the model has signatures {', '.join(sorted(by_key))}: give data as a dict "
                "keyed by signature"
            )
        return {by_key[k]: v for k, v in data.items()}
    (s,) = entries
    return {s: data}


def entry_datasets(model: Model, data: Any, limit: int | None = None) -> dict[int, Dataset]:
    """Data per entry subgraph, from the Python API (`entry_data`), as datasets."""
    return {
        s: as_dataset(given, model_inputs(model, s), limit)
        for s, given in entry_data(model, data).items()
    }


def split_sources(sources: Sequence[str], entries: dict[int, str | None]) -> dict[int, list[str]]:
    """Assign `--data` sources to subgraphs: `KEY=PATH` names a signature; a plain PATH feeds
    the only entry point (a model with several signatures needs a KEY on each source)."""
    by_key = {key: s for s, key in entries.items() if key is not None}
    assigned: dict[int, list[str]] = {}
    for source in sources:
        key, separator, path = source.partition("=")
        if separator and key in by_key:
            assigned.setdefault(by_key[key], []).append(path)
        elif len(entries) == 1:
            assigned.setdefault(next(iter(entries)), []).append(source)
        else:
            raise UsageError(
                f"`data={source!r}`: the model has signatures {', '.join(sorted(by_key))}; give "
                "each source as KEY=PATH"
            )
    missing = [key or f"subgraph {s}" for s, key in entries.items() if s not in assigned]
    if missing:
        raise UsageError(f"no `data` for signature(s) {', '.join(missing)} (give KEY=PATH)")
    return assigned


def source_datasets(
    model: Model, sources: Sequence[str], limit: int | None = None
) -> dict[int, Dataset]:
    """Data per entry subgraph from command-line sources (`--data`, `--holdout`)."""
    return {
        s: load_dataset(paths, model_inputs(model, s), limit=limit)
        for s, paths in split_sources(sources, entry_subgraphs(model)).items()
    }
