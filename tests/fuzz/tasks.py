"""The units of work of a campaign, run in-process by `run_task` (in a pool worker or a test)."""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
from pathlib import Path

from tests.fuzz import api_cases, data_cases, hostile_cases, option_cases, output_cases
from tests.fuzz.judge import Verdict, judge_files, judge_streams, run_cli, snapshot
from tests.fuzz.models import FIXTURE_DATA, FIXTURE_MODELS, TIMEOUT, Base, run_model_case

DATA_MODELS = {"mlp": (32,), "cnn": (24, 24, 3), "multi_io": (16, 16, 3)}


# How a bad-data case reaches qtool: as calibration data, as held-out samples beside good
# calibration data, or as the data of `qtool analyze`.
DATA_ROUTES = ("data", "holdout", "analyze")


# The hostile kinds of issue 21, each a function of a seed (`hostile_cases.py`, `api_cases.py`).
SEEDED = {
    "names": hostile_cases.run_names_case,
    "config": hostile_cases.run_config_case,
    "arguments": hostile_cases.run_arguments_case,
    "api": lambda seed, workdir: api_cases.run_api_case(seed),
}


def run_task(task: tuple, workdir: str, judge_input: bool = True) -> list[Verdict]:
    """One task: ("model", Base, seed, mode) | ("data", case name, model, route) |
    ("output", name) | ("option", name) | (a SEEDED kind, seed)."""
    kind = task[0]
    if kind == "model":
        _, base, seed, mode = task
        return run_model_case(base, seed, mode, workdir, judge_input)
    if kind == "data":
        return [run_data_case(task[1], task[2], workdir, task[3])]
    if kind in SEEDED:
        return SEEDED[kind](task[1], workdir)
    return [run_output_case(task[1], workdir, kind)]


def seeded_tasks(kind: str, count: int, seed: int) -> list[tuple]:
    return [(kind, seed * 1_000_003 + i) for i in range(count)]


def _case_dir(workdir: str, prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))


def _data_argv(route: str, model: Path, model_name: str, data_argv: list[str], out: Path):
    """The command line of a bad-data case on `route`, and the files a success writes."""
    if route == "analyze":  # held-out samples apart, so that a few samples can calibrate
        argv = ["analyze", str(model), *data_argv, "-o", str(out.with_suffix(".json")), "--quiet"]
        argv += ["--holdout", str(FIXTURE_DATA / f"{model_name}_holdout.npz")]
        return argv, {"out.json"}
    if route == "holdout":
        good = ["--data", str(FIXTURE_DATA / f"{model_name}_calib.npz"), "--samples", "8"]
        data_argv = good + ["--holdout" if a == "--data" else a for a in data_argv]
    argv = ["quantize", str(model), *data_argv, "-o", str(out), "--quiet"]
    return argv, {"out.tflite", "out.report.json"}


def run_data_case(name: str, model_name: str, workdir: str, route: str = "data") -> Verdict:
    case = next(c for c in data_cases.CASES if c.name == name)
    directory = _case_dir(workdir, "data-")
    command = {"data": "quantize --data", "holdout": "quantize --holdout"}.get(route, route)
    verdict = Verdict(f"{name} ({model_name})", command)
    try:
        model = directory / "model.tflite"
        shutil.copy(FIXTURE_MODELS / f"{model_name}.tflite", model)
        data_argv = case.build(directory, DATA_MODELS[model_name])
        argv, written = _data_argv(route, model, model_name, data_argv, directory / "out.tflite")
        sys.path.insert(0, str(directory))  # generator modules live in the case directory
        before = snapshot(directory)
        try:
            result = run_cli(argv, TIMEOUT)
        finally:
            sys.path.remove(str(directory))
        judge_streams(verdict, result)
        judge_files(verdict, before, snapshot(directory), written, result.code)
        _judge_expectation(verdict, result.code, case.expect)
        verdict.succeeded = result.code == 0
        return verdict
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_output_case(name: str, workdir: str, kind: str = "output") -> Verdict:
    cases = output_cases.CASES if kind == "output" else option_cases.CASES
    case = next(c for c in cases if c.name == name)
    directory = _case_dir(workdir, "out-")
    verdict = Verdict(name, "output path")
    try:
        (directory / "in").mkdir()
        model = directory / "in" / "model.tflite"
        shutil.copy(FIXTURE_MODELS / "mlp.tflite", model)
        plan = case.build(directory, model)
        before = snapshot(directory)
        result = run_cli(plan.argv, TIMEOUT)
        judge_streams(verdict, result, check=plan.argv[0] == "check")
        if plan.argv[0] in ("quantize", "analyze"):
            judge_files(verdict, before, snapshot(directory), plan.written, result.code)
        elif result.code == 2 and snapshot(directory) != before:
            verdict.fail("files", "a refused check -o changed files")
        _judge_expectation(verdict, result.code, plan.expect)
        if plan.extra is not None and result.code == 0:
            problem = plan.extra(directory)
            if problem:
                verdict.fail("files", problem)
        verdict.succeeded = result.code == 0
        return verdict
    finally:
        _unlock(directory)
        shutil.rmtree(directory, ignore_errors=True)


def _unlock(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o644)


def _judge_expectation(verdict: Verdict, code: int, expect: frozenset[int]) -> None:
    if code in expect or verdict.failures.keys() & {"traceback", "hang"}:
        return
    if code == 0:
        verdict.fail("invalid", "bad input accepted (exit 0)")
    else:
        verdict.fail("unexpected", f"exit {code}, expected {sorted(expect)}")


def all_data_tasks(routes: tuple[str, ...] = DATA_ROUTES) -> list[tuple]:
    return [("data", c.name, m, r) for r in routes for c in data_cases.CASES for m in c.models]


def all_output_tasks() -> list[tuple]:
    return [("output", c.name) for c in output_cases.CASES]


def all_option_tasks() -> list[tuple]:
    return [("option", c.name) for c in option_cases.CASES]


def model_tasks(bases: list[Base], count: int, seed: int, byte_share: float = 0.3) -> list[tuple]:
    """`count` model mutants spread over `bases`, a `byte_share` of them byte-level."""
    rng = random.Random(seed)
    tasks = []
    for i in range(count):
        base = bases[i % len(bases)]
        mode = "bytes" if rng.random() < byte_share else "structured"
        tasks.append(("model", base, seed * 1_000_003 + i, mode))
    return tasks


__all__ = [
    "FIXTURE_DATA",
    "all_data_tasks",
    "all_option_tasks",
    "all_output_tasks",
    "model_tasks",
    "run_task",
    "seeded_tasks",
]
