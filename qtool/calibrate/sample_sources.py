"""Reading calibration samples from files and Python generators, safely.

Only regular files are opened (a FIFO or a device named x.npy is refused, never waited on),
declared sizes are checked before allocating (`npyfile.py`), every read error is one DataError
naming the file, values are checked finite after the cast to the input's type, and an exception
in the user's generator becomes one line naming the module, function and exception.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qtool.calibrate.inputs import Batch, InputSpec
from qtool.calibrate.npyfile import (
    MAGIC,
    ZIP_MAGICS,
    ArrayFileError,
    first_shape,
    load_npy,
    load_npz,
)
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
    with handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            signature = handle.read(6)
            handle.seek(0)
            # numpy falls back to unpickling unknown files; say what the file is not instead.
            if signature.startswith(MAGIC):
                arrays: dict[str, np.ndarray] | None = None
                array = load_npy(handle, size)
            elif signature.startswith(ZIP_MAGICS):
                arrays = load_npz(handle)
            else:
                raise DataError(f"{path}: not a .npy or .npz file")
        except ArrayFileError as exc:
            raise DataError(f"{path}: {exc}") from None
        except OSError as exc:
            raise DataError(f"{path}: cannot read ({os_reason(exc)})") from None
    if arrays is None:
        if len(inputs) != 1:
            raise DataError(
                f"{path}: a .npy holds one array but the model has {len(inputs)} "
                "inputs; use a .npz keyed by input name"
            )
        samples = _leading_samples(array, inputs[0], str(path))
        rows = max(1, READ_CHUNK_BYTES // max(samples[:1].nbytes, 1))
        for start in range(0, samples.shape[0], rows):
            yield [_as_samples(samples[start : start + rows], inputs[0], str(path))]
        return
    yield match_named(arrays, inputs, str(path))


def match_named(arrays: dict[Any, Any], inputs: Sequence[InputSpec], where: str) -> Batch:
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
    sample = tuple(spec.sample_shape)
    if array.shape == sample:
        return array[None]
    if array.shape[1:] != sample:
        expected = "(N, " + ", ".join(map(str, sample)) + ")" if sample else "(N,)"
        raise DataError(
            f"{where}: input {spec.name!r} expects samples of shape {list(sample)}, "
            f"i.e. data of shape {expected}; got {list(array.shape)}"
        )
    return array


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


def _as_parameter(source: str) -> str:
    """A generator source as errors name it: the `data` parameter (the CLI shows --data)."""
    return f"`data={source!r}`"


def _user_error(
    source: str, label: str, exc: BaseException, sample: int | None = None
) -> DataError:
    """One line for an exception raised by the user's code (raised `from` it, so that `--debug`
    prints its traceback)."""
    where = "" if sample is None else f" at sample {sample}"
    return DataError(f"{_as_parameter(source)}: {label} raised {exception_summary(exc)}{where}")


@contextlib.contextmanager
def _importable(folder: str) -> Iterator[None]:
    """`folder` first on sys.path while the user's module imports (unless it is there)."""
    added = folder not in sys.path and not (folder == os.getcwd() and "" in sys.path)
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added:
            sys.path.remove(folder)


def _import_file(source: str, file_name: str):
    """A .py file run as `python path/to/file.py` would run it: its folder importable (sibling
    modules), and the module in sys.modules while it runs (dataclasses look it up there)."""
    path = Path(file_name)
    if lookup(file_name) is None:
        raise UsageError(f"{_as_parameter(source)}: no such file {file_name}")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    replaced = sys.modules.get(path.stem)
    sys.modules[path.stem] = module
    try:
        with _importable(str(path.resolve().parent)):
            spec.loader.exec_module(module)
    finally:
        if replaced is None:
            sys.modules.pop(path.stem, None)
        else:
            sys.modules[path.stem] = replaced
    return module


def _import(source: str, module_name: str):
    """The module a generator source names: a file path ending in .py, or a (dotted) module
    name found from the current directory first, as `python -m` would."""
    if module_name.endswith(".py"):
        return _import_file(source, module_name)
    try:
        with _importable(os.getcwd()):
            return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name != missing and not module_name.startswith(f"{missing}."):
            raise
        raise UsageError(f"{_as_parameter(source)}: no module named {module_name!r}") from None


def _load_generator(source: str) -> tuple[Callable[[], Any], str]:
    module_name, _, function_name = source.rpartition(":")
    try:
        module = _import(source, module_name)
    except UsageError:
        raise
    except (Exception, SystemExit) as exc:  # the user's module failed while importing
        raise _user_error(source, f"importing {module_name}", exc) from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UsageError(
            f"{_as_parameter(source)}: module {module_name!r} has no function {function_name!r}"
        )
    return (
        function,
        f"{Path(module_name).stem if module_name.endswith('.py') else module_name}.{function_name}",
    )


def load_function(source: str, parameter: str = "data") -> tuple[Callable[[], Any], str]:
    """The function a `module:function` or `path/to/file.py:function` source names, imported
    as a `--data` generator is, and its label (`module.function`); errors name `parameter`
    (`metric` for `--metric`) instead of `data`."""
    named = f"`{parameter}={source!r}`"
    if GENERATOR.fullmatch(source) is None:
        raise UsageError(f"{named}: not a function: give module:function or file.py:function")
    try:
        return _load_generator(source)
    except (UsageError, DataError) as exc:
        raise type(exc)(str(exc).replace(_as_parameter(source), named, 1)) from exc.__cause__


def _read_generator(source: str, inputs: Sequence[InputSpec]) -> Iterator[Batch]:
    """`module:function`, yielding per sample a list (input order) or a dict (name -> array)."""
    function, label = _load_generator(source)
    yield from generated_batches(function, inputs, _as_parameter(source), label, source)


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
