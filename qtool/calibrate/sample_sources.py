"""Reading calibration samples from files and Python generators, safely.

Only regular files are opened (a FIFO or a device named x.npy is refused, never waited on),
declared sizes are checked before allocating (`npyfile.py`), every read error is one DataError
naming the file, values are checked finite after the cast to the input's type, and an exception
in the user's generator becomes one line naming the module, function and exception.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qtool.calibrate.inputs import Batch, InputSpec
from qtool.calibrate.npyfile import (
    MAGIC,
    ZIP_MAGICS,
    ArrayFileError,
    NpzArchive,
    first_shape,
    npy_header,
    read_rows,
)
from qtool.calibrate.usercode import as_parameter, load_generator
from qtool.errors import DataError, UsageError, exception_summary
from qtool.files import exists, lookup, open_regular, os_reason

# `package.module:function`, or `path/to/file.py:function`.
GENERATOR = re.compile(r"(?:[A-Za-z_][\w.]*|.+\.py):[A-Za-z_]\w*")
READ_CHUNK_BYTES = 1 << 26  # a memory-mapped .npy is converted this much at a time


def count_samples(source: str, inputs: Sequence[InputSpec]) -> int | None:
    """Samples in a file source, from the .npy headers alone; None when it cannot tell."""
    if is_generator(source):
        return None
    path = Path(source)
    try:
        files = _directory_files(path) if path.is_dir() else [path]
    except (DataError, OSError, ValueError):
        return None
    total = 0
    for file in files:
        try:
            with open_regular(file) as handle:
                shape = first_shape(handle)
        except (OSError, ValueError):
            return None
        if shape is None:
            return None
        sample = tuple(inputs[0].sample_shape)
        total += 1 if tuple(shape) == sample else (shape[0] if shape else 1)
    return total


def is_generator(source: str) -> bool:
    """`module:function` naming no file: a Python generator of samples."""
    return GENERATOR.fullmatch(source) is not None and not exists(source)


def check_exists(source: str) -> None:
    """DataError unless `source` names a generator or a path that exists."""
    if is_generator(source):
        return
    try:
        found = lookup(source)
    except (OSError, ValueError) as exc:
        raise DataError(f"{source}: cannot read ({os_reason(exc)})") from None
    if found is None:
        raise DataError(f"{source}: no such file or directory")


def _directory_files(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.suffix in (".npy", ".npz"))
    except OSError as exc:
        raise DataError(f"{path}: cannot list the directory ({os_reason(exc)})") from None


def read_source(source: str, inputs: Sequence[InputSpec]) -> Iterator[Batch]:
    """The batches of one `--data` source: a .npy or .npz file, a directory of them (by name), or
    a `module:function` generator. Every problem raises DataError naming the source."""
    path = Path(source)
    if is_generator(source):
        yield from _read_generator(source, inputs)
    elif path.is_dir():
        files = _directory_files(path)
        if not files:
            raise DataError(f"{source}: directory holds no .npy or .npz files")
        for file in files:
            yield from _read_file(file, inputs)
    else:
        yield from _read_file(path, inputs)


def _read_file(path: Path, inputs: Sequence[InputSpec]) -> Iterator[Batch]:
    try:
        handle = open_regular(path)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read ({os_reason(exc)})") from None
    # Open while the batches are read: a .npy is read a block of rows at a time, an .npz
    # member when it is used.
    with handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            signature = handle.read(6)
            handle.seek(0)
            # numpy falls back to unpickling unknown files; say what the file is not instead.
            if signature.startswith(MAGIC):
                yield from _read_npy(handle, size, inputs, str(path))
            elif signature.startswith(ZIP_MAGICS):
                yield match_named(NpzArchive(handle), inputs, str(path))
            else:
                raise DataError(f"{path}: not a .npy or .npz file")
        except ArrayFileError as exc:
            raise DataError(f"{path}: {exc}") from None
        except OSError as exc:
            raise DataError(f"{path}: cannot read ({os_reason(exc)})") from None


def _read_npy(handle: Any, size: int, inputs: Sequence[InputSpec], where: str) -> Iterator[Batch]:
    """The samples of a .npy file, read from the file a block of rows at a time."""
    header = npy_header(handle, size)
    if len(inputs) != 1:
        raise DataError(
            f"{where}: a .npy holds one array but the model has {len(inputs)} "
            "inputs; use a .npz keyed by input name"
        )
    (spec,) = inputs
    if tuple(header.shape) == tuple(spec.sample_shape):  # one sample, without the leading N
        yield [_as_samples(read_rows(handle, header, 0, _rows(header.shape)), spec, where)]
        return
    _check_sample_shape(header.shape, spec, where)
    sample_bytes = math.prod(header.shape[1:]) * header.dtype.itemsize
    rows = max(1, READ_CHUNK_BYTES // max(sample_bytes, 1))
    for start in range(0, header.shape[0], rows):
        count = min(rows, header.shape[0] - start)
        yield [_as_samples(read_rows(handle, header, start, count), spec, where)]


def _rows(shape: tuple[int, ...]) -> int:
    return shape[0] if shape else 1


def match_named(arrays: Mapping[Any, Any], inputs: Sequence[InputSpec], where: str) -> Batch:
    """Arrays keyed by input name, or arr_0, arr_1... in input order."""
    strange = [key for key in arrays if not isinstance(key, str)]
    if strange:
        raise DataError(f"{where}: keys must be input names (strings), got {strange[0]!r}")
    positional = all(key.startswith("arr_") for key in arrays)
    batch = []
    for position, spec in enumerate(inputs):
        if positional:
            key = f"arr_{position}"
            found = key if key in arrays else None
        else:
            found = next((key for key in arrays if spec.matches(key)), None)
        if found is None:
            known = ", ".join(sorted(arrays)) or "none"
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


def _leading_samples(array: Any, spec: InputSpec, where: str) -> np.ndarray:
    """One sample (sample shape) or N samples as (N, *sample_shape), values untouched."""
    try:
        array = np.asarray(array)
    except Exception as exc:  # the user's object refuses to become an array
        raise DataError(
            f"{where}: input {spec.name!r}: not an array ({exception_summary(exc)})"
        ) from None
    if array.shape == tuple(spec.sample_shape):
        return array[None]
    _check_sample_shape(array.shape, spec, where)
    return array


def _check_sample_shape(shape: tuple[int, ...], spec: InputSpec, where: str) -> None:
    """Data of `shape` holds N samples of the input's sample shape (or of a shape its
    signature allows)."""
    sample = tuple(spec.sample_shape)
    if not shape or not spec.fits(tuple(shape[1:])):
        expected = "(N, " + ", ".join(map(str, sample)) + ")" if sample else "(N,)"
        raise DataError(
            f"{where}: input {spec.name!r} expects samples of shape {list(sample)}, "
            f"i.e. data of shape {expected}; got {list(shape)}"
        )


def _as_samples(array: Any, spec: InputSpec, where: str) -> np.ndarray:
    """Samples as (N, *sample_shape) in the input's dtype, every value finite after the cast."""
    array = _leading_samples(array, spec, where)
    if array.dtype.kind not in "fiub":
        raise DataError(f"{where}: input {spec.name!r} has non-numeric data ({array.dtype})")
    converted = array
    if array.dtype != spec.dtype:
        if not np.can_cast(array.dtype, spec.dtype, casting="same_kind"):
            raise DataError(
                f"{where}: input {spec.name!r} expects {spec.dtype} data, got {array.dtype}"
            )
        with np.errstate(all="ignore"):  # what the cast does to values is checked below
            converted = array.astype(spec.dtype)
        if converted.dtype.kind in "iu" and np.any(converted != array):
            raise DataError(
                f"{where}: input {spec.name!r} has values outside the range of {spec.dtype}"
            )
    if converted.dtype.kind == "f":
        bad = ~np.isfinite(converted)
        if bad.any():
            count = int(np.count_nonzero(bad))
            beyond = array.dtype.kind != "f" or bool(np.all(np.isfinite(array[bad])))
            what = f"values beyond the {spec.dtype} range" if beyond else "NaN/inf values"
            raise DataError(f"{where}: input {spec.name!r} contains {count} {what}")
    return converted


def source_files(source: str) -> list[str]:
    """The files a `--data` source names, before anything is read: the file, the arrays of a
    directory, or the module of a generator (`path/gen.py:fn`, or `pkg.mod:fn` found from the
    current directory, where it is imported from first)."""
    if not is_generator(source):
        path = Path(source)
        try:
            return [str(p) for p in _directory_files(path)] if path.is_dir() else [source]
        except (DataError, OSError, ValueError):
            return [source]
    module_name = source.rpartition(":")[0]
    if module_name.endswith(".py"):
        return [module_name]
    folder = Path(*module_name.split("."))
    return [str(folder.with_suffix(".py")), str(folder / "__init__.py")]


def load_function(source: str, parameter: str = "data") -> tuple[Callable[[], Any], str]:
    """The function a `module:function` or `path/to/file.py:function` source names, imported
    as a `--data` generator is, and its label (`module.function`); errors name `parameter`
    (`metric` for `--metric`) instead of `data`."""
    named = f"`{parameter}={source!r}`"
    if GENERATOR.fullmatch(source) is None:
        raise UsageError(f"{named}: not a function: give module:function or file.py:function")
    try:
        return load_generator(source)
    except (UsageError, DataError) as exc:
        raise type(exc)(str(exc).replace(as_parameter(source), named, 1)) from exc.__cause__


def _read_generator(source: str, inputs: Sequence[InputSpec]) -> Iterator[Batch]:
    """`module:function`, yielding per sample a list (input order) or a dict (name -> array)."""
    function, label = load_generator(source)
    yield from generated_batches(function, inputs, as_parameter(source), label, source)


def generated_batches(
    make: Callable[[], Any], inputs: Sequence[InputSpec], source: str, label: str, where: str
) -> Iterator[Batch]:
    """The samples of the iterable `make()` returns, as batches. The user's code runs between
    our checks: whatever it raises becomes one DataError naming `label` and the exception."""

    def failed(exc: BaseException, sample: int | None = None) -> DataError:
        at = "" if sample is None else f" at sample {sample}"
        return DataError(f"{source}: {label} raised {exception_summary(exc)}{at}")

    try:
        result = make()
    except (Exception, SystemExit) as exc:
        raise failed(exc) from exc
    try:
        samples = iter(result)
    except TypeError:
        raise DataError(
            f"{source}: {label}() returned {type(result).__name__}, not an iterable of samples"
        ) from None
    number = 0
    while True:
        try:
            sample = next(samples)
        except StopIteration:
            return
        except (Exception, SystemExit) as exc:
            raise failed(exc, number) from exc
        yield _generated_batch(sample, inputs, f"{where} sample {number}")
        number += 1


def _generated_batch(sample: Any, inputs: Sequence[InputSpec], where: str) -> Batch:
    if isinstance(sample, dict):
        return match_named(sample, inputs, where)
    values = list(sample) if isinstance(sample, list | tuple) else [sample]
    if len(values) != len(inputs):
        raise DataError(f"{where}: {len(values)} arrays for {len(inputs)} inputs")
    batch = [_as_samples(v, spec, where) for v, spec in zip(values, inputs, strict=True)]
    _same_count(batch, where)
    return batch
