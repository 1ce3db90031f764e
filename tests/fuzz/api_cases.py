"""API probes for the campaign (issue 21): calls of qtool.quantize, calibrate, analyze and check
with arguments a careless or hostile caller passes (wrong types, out-of-range values, unknown
keywords, models as bytes, garbage, endless generator objects). A probe passes when the call
returns or raises a QtoolError subclass, within its deadline; anything else (TypeError,
AttributeError, a hang, an endless generator read past `samples`) is a failure.
"""

from __future__ import annotations

import itertools
import random
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.fuzz.judge import Deadline, Verdict, deadline
from tests.fuzz.models import FIXTURE_DATA, FIXTURE_MODELS

MLP = FIXTURE_MODELS / "mlp.tflite"
MLP_INT8 = FIXTURE_MODELS / "tf_int8" / "mlp_int8.tflite"
TIMEOUT = 120.0
ODD_VALUES = [
    None,
    True,
    0,
    -5,
    2**70,
    1.5,
    float("nan"),
    float("inf"),
    "10",
    "",
    "auto",
    b"x",
    [],
    ["SOFTMAX"],
    {},
    {"a": 1},
    object(),
    (i for i in range(3)),
    Path("nowhere"),
]


def _samples() -> np.ndarray:
    return np.load(FIXTURE_DATA / "mlp_calib.npz")["serving_default_features:0"][:16]


class _Endless:
    """An endless generator object that counts what was read from it."""

    def __init__(self, rows: np.ndarray) -> None:
        self.read = 0
        self.rows = itertools.cycle(rows)

    def __iter__(self) -> _Endless:
        return self

    def __next__(self) -> list[np.ndarray]:
        self.read += 1
        return [next(self.rows)[None]]


def _data(rng: random.Random) -> Any:
    samples = _samples()
    return rng.choice(
        [
            samples,
            [samples],
            {"features": samples},
            str(FIXTURE_DATA / "mlp_calib.npz"),
            (row[None] for row in samples),
            lambda: iter([[row[None]] for row in samples]),
            rng.choice(ODD_VALUES),
        ]
    )


def _model(rng: random.Random, quantized: bool) -> Any:
    path = MLP_INT8 if quantized else MLP
    blob = path.read_bytes()
    return rng.choice(
        [
            path,
            str(path),
            blob,
            bytearray(blob),
            blob[: rng.randint(0, len(blob))],
            rng.choice(ODD_VALUES),
        ]
    )


def _probe(rng: random.Random) -> tuple[str, Callable[[], Any], _Endless | None, int | None]:
    """(description, call, the endless generator given if any, the samples asked for)."""
    import qtool

    function = rng.choice(["quantize", "calibrate", "analyze", "check"])
    keywords: dict[str, Any] = {}
    endless = None
    samples = None
    if function == "check":
        model = _model(rng, quantized=True)
        for name in ("per_tensor_fc", "target", "fail_on", "min_sqnr"):
            if rng.random() < 0.3:
                keywords[name] = rng.choice([*ODD_VALUES, "tflm", "warning", 25.0])
        if rng.random() < 0.3:
            keywords.update(reference=_model(rng, quantized=False), data=_data(rng))
        args: tuple = (model,)
    else:
        data: Any = _data(rng)
        if rng.random() < 0.3:
            endless = data = _Endless(_samples())
            samples = rng.randint(1, 20)
            keywords["samples"] = samples
        elif rng.random() < 0.4:
            keywords["samples"] = rng.choice([*ODD_VALUES, 4, 8])
        if function != "calibrate" and rng.random() < 0.4:
            keywords[
                rng.choice(["calibration", "engine", "io", "keep_float", "bogus", "target"])
            ] = rng.choice([*ODD_VALUES, "minmax", "numpy"])
        if function == "calibrate" and rng.random() < 0.3:
            keywords["engine"] = rng.choice([*ODD_VALUES, "numpy"])
        args = (_model(rng, quantized=False), data)
    call = getattr(qtool, f"{function}_model")
    shown = ", ".join(
        [*(type(a).__name__ for a in args), *(f"{k}={v!r:.30}" for k, v in keywords.items())]
    )
    return f"{function}({shown})", lambda: call(*args, **keywords), endless, samples


def run_api_probes(count: int, seed: int, workdir: str | Path | None = None) -> list[str]:
    """`count` probes; the failures, described."""
    return [f for verdict in run_api_case(seed, count) for f in verdict.failures.values()]


def run_api_case(seed: int, count: int = 1) -> list[Verdict]:
    from qtool.errors import QtoolError

    rng = random.Random(seed)
    verdicts = []
    for _ in range(count):
        described, call, endless, samples = _probe(rng)
        verdict = Verdict(f"api seed {seed}", described)
        try:
            with deadline(TIMEOUT):
                call()
            verdict.succeeded = True
        except QtoolError:
            pass
        except Deadline:
            verdict.fail("hang", f"{described} did not return")
        except Exception as exc:  # what a Python caller would get besides QtoolError
            frames = traceback.extract_tb(exc.__traceback__)
            where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
            verdict.fail("traceback", f"{described}: {type(exc).__name__}: {exc} at {where}")
        if endless is not None and samples is not None and endless.read > samples + 1:
            verdict.fail("invalid", f"{described}: read {endless.read} samples of {samples}")
        verdicts.append(verdict)
    return verdicts
