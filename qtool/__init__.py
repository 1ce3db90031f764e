"""qtool: quantize float TFLite models to the int8 spec, and audit quantized models.

The Python API (`qtool/api.py`) is loaded on first use, so `import qtool` stays cheap:

    import qtool
    result = qtool.quantize("model.tflite", samples)
    result.save("model_int8.tflite")
    qtool.check(result.model_bytes).passed

`qtool.quantize`, `qtool.check` and `qtool.calibrate` are the API functions, although the
packages implementing them have the same names (`from qtool.quantize import ...` still reaches
the package).
"""

from __future__ import annotations

import sys
import types
from typing import Any

__version__ = "0.1.0"

API = (
    "analyze",
    "calibrate",
    "check",
    "load_model",
    "quantize",
    "CalibrationStatistics",
    "CheckResult",
    "Quantized",
)
__all__ = ["__version__", *API]


class _Package(types.ModuleType):
    """Keeps the API functions when the same-named subpackages are imported (importing
    `qtool.quantize` would otherwise replace the function `qtool.quantize` with the package)."""

    def __getattr__(self, name: str) -> Any:
        if name in API:
            from qtool import api

            value = getattr(api, name)
            super().__setattr__(name, value)
            return value
        raise AttributeError(f"module 'qtool' has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in API and isinstance(value, types.ModuleType):
            return  # a subpackage being imported: `qtool.<name>` stays the API function
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
