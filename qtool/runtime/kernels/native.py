"""The numpy engine's kernels in C (`_native.c`), or None where qtool was built without a C
compiler (pip builds the extension where one is: pyproject.toml). Each kernel gives the results
of the numpy code it stands in for bit for bit, so that nothing but speed depends on it
(tests/runtime/test_native_kernels.py runs both)."""

from __future__ import annotations

from types import ModuleType

kernels: ModuleType | None
try:
    from qtool.runtime.kernels import _native as kernels
except ImportError:  # built without a C compiler: the numpy code runs
    kernels = None
