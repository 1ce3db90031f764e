"""Inputs changed while qtool runs (issue 21), in real processes: after a random delay the model
or the calibration data a run reads is truncated, overwritten, or removed. Whatever happens the
run ends with an exit code and at most one error line (never SIGBUS or another signal), leaves
no temporary behind, and a model it writes reads back.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.fuzz.judge import Verdict, loads_everywhere
from tests.fuzz.process_cases import wait_for

ROOT = Path(__file__).resolve().parents[2]
CHANGES = ("truncate", "shrink to the header", "overwrite", "remove", "grow")


@dataclass(frozen=True)
class ChangingCase:
    name: str
    target: str  # "model" or "data"
    change: str  # one of CHANGES
    delay: float
    command: str  # "quantize" or "check --reference"


def changing_cases(count: int, seed: int) -> list[ChangingCase]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        target = rng.choice(["model", "data"])
        change = rng.choice(CHANGES)
        delay = round(rng.uniform(0.0, 2.5), 2)
        command = "check --reference" if i % 4 == 3 else "quantize"
        cases.append(
            ChangingCase(f"{change} {target} after {delay} s", target, change, delay, command)
        )
    return cases


DATA_BYTES = 100 << 20  # read in two blocks of 64 MB: a change can land between them


def _large_data(path: Path, model: Path) -> None:
    """A .npy of about DATA_BYTES of random samples for the model's single input."""
    from qtool.calibrate import model_inputs
    from qtool.model import load_model

    (spec,) = model_inputs(load_model(model))
    sample = int(np.prod(spec.sample_shape)) * np.dtype(spec.dtype).itemsize
    count = max(64, DATA_BYTES // max(sample, 1))
    rng = np.random.default_rng(0)
    np.save(path, rng.random((count, *spec.sample_shape), dtype=np.float32).astype(spec.dtype))


def _change(path: Path, change: str, rng: random.Random) -> None:
    size = path.stat().st_size
    if change == "truncate":
        os.truncate(path, rng.randint(0, size))
    elif change == "shrink to the header":
        os.truncate(path, min(size, 128))
    elif change == "overwrite":
        with open(path, "r+b") as handle:
            handle.seek(rng.randint(0, max(size - 4096, 0)))
            handle.write(os.urandom(4096))
    elif change == "remove":
        path.unlink()
    else:
        with open(path, "ab") as handle:
            handle.write(os.urandom(1 << 20))


def run_changing_case(case: ChangingCase, model: Path, workdir: str) -> Verdict:
    verdict = Verdict(case.name, case.command)
    directory = Path(tempfile.mkdtemp(prefix="change-", dir=workdir))
    try:
        copy = directory / "m.tflite"
        shutil.copy(model, copy)
        data = directory / "x.npy"
        _large_data(data, model)
        out = directory / "q.tflite"
        if case.command == "quantize":
            argv = ["quantize", str(copy), "--data", str(data), "-o", str(out), "--quiet"]
        else:
            argv = ["check", str(copy), "--reference", str(copy), "--data", str(data)]
        process = subprocess.Popen(
            [sys.executable, "-m", "qtool", *argv],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(case.delay)
        if process.poll() is None:
            _change(copy if case.target == "model" else data, case.change, random.Random(case.name))
        streams = wait_for(process, verdict, 600)
        if streams is None:
            return verdict
        stdout, stderr = streams
        code = process.returncode
        if code < 0 or code > 128:
            verdict.fail("crash", f"exit {code} (a signal): {stderr.strip()[-200:]!r}")
        if "Traceback" in stderr or "internal error" in stderr:
            verdict.fail("traceback", stderr.strip().splitlines()[-1])
        errors = [line for line in stderr.splitlines() if line.startswith("qtool: error:")]
        others = [
            line
            for line in stderr.splitlines()
            if line.strip() and not line.startswith(("qtool: error:", "qtool: warning:"))
        ]
        # check reports a model it cannot read in its report (stdout), the others on stderr.
        unreadable = case.command.startswith("check") and ": cannot read: " in stdout
        if code == 2 and (len(errors) != (0 if unreadable else 1) or others):
            verdict.fail("untidy", f"exit 2, stderr {stderr.strip()[:300]!r}")
        left = [p.name for p in directory.iterdir() if p.name.startswith(".qtool-")]
        if left:
            verdict.fail("files", f"left behind: {left}")
        if code == 0 and case.command == "quantize":
            problem = loads_everywhere(out.read_bytes()) if out.exists() else "not written"
            if problem:
                verdict.fail("invalid", f"exit 0 but the output: {problem}")
        verdict.succeeded = code in (0, 1)
        return verdict
    finally:
        shutil.rmtree(directory, ignore_errors=True)
