"""qtool: quantize float TFLite models to the int8 spec, and audit quantized models.

The Python API (`qtool/api.py`), one function per command, is loaded on first use, so
`import qtool` stays cheap:

    import qtool
    result = qtool.quantize_model("model.tflite", samples)
    result.save("model_int8.tflite")
    qtool.check_model(result.model_bytes).passed

The subpackages (`qtool.quantize`, `qtool.check`, `qtool.calibrate`...) are the layers below it,
importable for finer control.
"""

from __future__ import annotations

from typing import Any

from qtool.version import __version__

API = (
    "analyze_model",
    "calibrate_model",
    "check_model",
    "load_model",
    "quantize_model",
    "CalibrationStatistics",
    "CheckResult",
    "Quantized",
)
__all__ = ["__version__", *API]


def __getattr__(name: str) -> Any:
    """The API's names, imported from `qtool.api` when first used (PEP 562)."""
    if name in API:
        from qtool import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'qtool' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
