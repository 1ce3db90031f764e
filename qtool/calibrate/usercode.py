"""The user's Python code as a source of calibration samples: `module:function` and
`path/to/file.py:function` generators, imported as `python -m` and `python path/to/file.py`
would import them, their failures one line naming the module, the function and the exception.
Every module imported is recorded as an input of the run (no output may replace it).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from qtool.errors import DataError, UsageError, exception_summary
from qtool.files import lookup, note_input


def as_parameter(source: str) -> str:
    """A generator source as errors name it: the `data` parameter (the CLI shows --data)."""
    return f"`data={source!r}`"


def _user_error(
    source: str, label: str, exc: BaseException, sample: int | None = None
) -> DataError:
    """One line for an exception raised by the user's code (raised `from` it, so that `--debug`
    prints its traceback)."""
    where = "" if sample is None else f" at sample {sample}"
    return DataError(f"{as_parameter(source)}: {label} raised {exception_summary(exc)}{where}")


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
        raise UsageError(f"{as_parameter(source)}: no such file {file_name}")
    note_input(path)  # the user's code is an input: no output may replace it
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
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name != missing and not module_name.startswith(f"{missing}."):
            raise
        raise UsageError(f"{as_parameter(source)}: no module named {module_name!r}") from None
    if getattr(module, "__file__", None):
        note_input(module.__file__)
    return module


def load_generator(source: str) -> tuple[Callable[[], Any], str]:
    """The function a `module:function` source names, and how errors call it (module.function);
    the module is imported now."""
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
            f"{as_parameter(source)}: module {module_name!r} has no function {function_name!r}"
        )
    return (
        function,
        f"{Path(module_name).stem if module_name.endswith('.py') else module_name}.{function_name}",
    )
