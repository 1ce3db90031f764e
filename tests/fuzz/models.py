"""Model mutants through `qtool inspect`, `check` and `quantize`, judged run by run."""

from __future__ import annotations

import functools
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.fuzz.judge import (
    Verdict,
    judge_files,
    judge_streams,
    loads_everywhere,
    run_cli,
    snapshot,
)
from tests.fuzz.mutate.byte_level import byte_mutant, weight_spans
from tests.fuzz.mutate.structured import structured_mutant

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_MODELS = ROOT / "fixtures" / "models"
FIXTURE_DATA = ROOT / "fixtures" / "data"
TIMEOUT = 60.0  # seconds for one command line (the slowest real model quantizes in ~2 s)
# Shares of the mutants also analysed (an analysis of a real model takes ~10 s).
ANALYZE_FIXTURE, ANALYZE_REAL = 0.25, 0.01


@dataclass(frozen=True)
class Base:
    name: str
    path: Path
    data: Path | None  # calibration data matching the unmutated model
    real: bool


def fixture_bases() -> list[Base]:
    return [
        Base(p.stem, p, FIXTURE_DATA / f"{p.stem}_calib.npz", False)
        for p in sorted(FIXTURE_MODELS.glob("*.tflite"))
    ]


def real_bases() -> list[Base]:
    """The MediaPipe models `bench/real_models.py` fetched (none when they are not there)."""
    from bench.real_models import CACHE, MODELS

    found = []
    for name in MODELS:
        path = CACHE / "models" / f"{name}.tflite"
        if path.exists():
            found.append(Base(name, path, None, True))
    return found


@functools.cache
def _base_bytes(path: Path) -> bytes:
    return path.read_bytes()


@functools.cache
def _spans(path: Path) -> list[tuple[int, int]]:
    return weight_spans(_base_bytes(path))


@functools.cache
def _real_data(path: Path, workdir: str) -> Path:
    """Four random samples in [0, 1] for a real model's (single) input."""
    from qtool.calibrate import model_inputs
    from qtool.model import load_model

    specs = model_inputs(load_model(path))
    rng = np.random.default_rng(0)
    target = Path(workdir) / f"{path.stem}_data.npz"
    np.savez(target, *[rng.random((4, *s.sample_shape)).astype(s.dtype) for s in specs])
    return target


def mutant(base: Base, seed: int, mode: str) -> tuple[bytes, str]:
    """The mutant of `base` for `seed`: structured or byte-level edits (retrying no-op draws)."""
    blob = _base_bytes(base.path)
    for attempt in range(50):
        rng = random.Random(f"{base.name}/{mode}/{seed}/{attempt}")
        if mode == "bytes":
            return byte_mutant(blob, rng, _spans(base.path))
        made = structured_mutant(blob, rng)
        if made is not None:
            return made
    return blob, "unchanged"


def quantize_argv(
    base: Base, model: Path, out: Path, rng: random.Random, workdir: str
) -> tuple[list[str], bool]:
    """A `qtool quantize` command line with varied options; whether it uses --force."""
    argv = ["quantize", str(model), "-o", str(out), "--quiet"]
    if base.data is not None and rng.random() < 0.4:
        argv += ["--data", str(base.data), "--samples", "4"]
    elif base.real and rng.random() < 0.3:
        argv += ["--data", str(_real_data(base.path, workdir))]
    else:
        argv += ["--synthetic", "--samples", "2" if base.real else "4"]
    for flag, chance in (("--per-tensor-fc", 0.1), ("--strict", 0.05)):
        if rng.random() < chance:
            argv.append(flag)
    if rng.random() < 0.2:
        argv += ["--io", rng.choice(("int8", "uint8"))]
    if rng.random() < 0.05:
        argv += ["--keep-float", "SOFTMAX"]
    if rng.random() < 0.05:
        argv += ["--engine", rng.choice(("numpy", "litert"))]
    argv += planning_argv(base, rng)
    if not base.real:  # searches and analyses that take minutes on a real model
        if rng.random() < 0.03:
            argv += ["--target-sqnr", rng.choice(("20", "40"))]
            argv += ["--allow-float"] if rng.random() < 0.5 else []
        if rng.random() < 0.03:
            argv.append("--analyze")
    force = rng.random() < 0.2
    if force:
        argv.append("--force")
    return argv, force


def planning_argv(base: Base, rng: random.Random) -> list[str]:
    """Options quantize and analyze share: calibration method, int16, rounding, held-out data."""
    argv = []
    if rng.random() < 0.15:
        argv += ["--calibration", rng.choice(("minmax", "percentile:99.9", "mse", "kl"))]
    if rng.random() < 0.05:
        argv += ["--activations", "int16"]
    elif rng.random() < 0.05:
        argv += ["--int16", rng.choice(("*", "CONV_2D", "FULLY_CONNECTED", "*ADD*", "*Relu*"))]
    if rng.random() < 0.05:
        argv.append(
            rng.choice(("--optimize-rounding", "--no-bias-correction", "--bias-correction"))
        )
    if base.data is not None and rng.random() < 0.1:
        argv += ["--holdout", str(base.data).replace("_calib", "_holdout")]
    return argv


def analyze_argv(base: Base, model: Path, rng: random.Random, workdir: str) -> list[str]:
    """A `qtool analyze` command line: a few samples, held out apart, varied planning options."""
    if base.real:
        data = str(_real_data(base.path, workdir))
        argv = ["analyze", str(model), "--data", data, "--holdout", data]
    else:
        argv = ["analyze", str(model), "--data", str(base.data), "--samples", "8"]
    argv += planning_argv(base, rng)
    return [*argv, "--json" if rng.random() < 0.5 else "--quiet"]


def run_model_case(
    base: Base, seed: int, mode: str, workdir: str, judge_input: bool = True
) -> list[Verdict]:
    """inspect (text, JSON), check and quantize on one mutant; a verdict per command.

    With `judge_input`, a successful quantize also asks LiteRT about the input (for the
    campaign's count of inputs qtool repairs that LiteRT refuses)."""
    blob, how = mutant(base, seed, mode)
    name = f"{base.name} {mode} seed {seed} ({how})"
    rng = random.Random(f"options/{base.name}/{mode}/{seed}")
    case_dir = Path(tempfile.mkdtemp(prefix="case-", dir=workdir))
    try:
        model = case_dir / "model.tflite"
        model.write_bytes(blob)
        fmt = rng.choice(("text", "json", "sarif", "junit"))
        verdicts = []
        commands = [
            ["inspect", str(model)],
            ["inspect", str(model), "--json", "--ops"],
            ["check", str(model), "--format", fmt],
        ]
        if rng.random() < (ANALYZE_REAL if base.real else ANALYZE_FIXTURE):
            commands.append(analyze_argv(base, model, rng, workdir))
        for argv in commands:
            verdict = Verdict(name, " ".join(a for a in argv[:1] + argv[2:] if "/" not in a))
            judge_streams(verdict, run_cli(argv, TIMEOUT), check=argv[0] == "check")
            verdicts.append(verdict)
        verdicts.append(_quantize(base, model, blob, name, rng, case_dir, workdir, judge_input))
        return verdicts
    finally:
        shutil.rmtree(case_dir, ignore_errors=True)


def _quantize(
    base: Base,
    model: Path,
    blob: bytes,
    name: str,
    rng: random.Random,
    case_dir: Path,
    workdir: str,
    judge_input: bool,
) -> Verdict:
    out_dir = case_dir / "out"
    out_dir.mkdir()
    out = out_dir / "model_int8.tflite"
    report = out_dir / "model_int8.report.json"
    argv, force = quantize_argv(base, model, out, rng, workdir)
    if force:  # earlier results the run may replace only with a complete new pair
        out.write_bytes(b"old model")
        report.write_text("{}")
        out.chmod(0o640)
    verdict = Verdict(name, "quantize " + " ".join(a for a in argv[2:] if "/" not in a))
    before = snapshot(case_dir)
    result = run_cli(argv, TIMEOUT)
    judge_streams(verdict, result)
    after = snapshot(case_dir)
    written = {"out/model_int8.tflite", "out/model_int8.report.json"}
    wrote = judge_files(verdict, before, after, written, result.code)
    if result.code == 0 and wrote:
        verdict.succeeded = True
        problem = loads_everywhere(out.read_bytes())
        if problem:
            verdict.fail("invalid", f"exit 0 but the written model is invalid: {problem}")
        refusal = loads_everywhere(blob) if judge_input else None
        if refusal:
            verdict.litert_refuses_input = True
            verdict.case += f" -- input: {refusal[:150]}"
    return verdict
