"""Fixtures of the runtime tests."""

from __future__ import annotations

import pytest

from qtool.runtime.kernels import native


@pytest.fixture(params=["c-kernels", "numpy-code"])
def kernel_code(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs twice: with the engine's C kernels (native.py) and with the numpy code
    that stands in for them where qtool was built without a C compiler."""
    if request.param == "numpy-code":
        monkeypatch.setattr(native, "kernels", None)
    return request.param
