"""A bounded, seeded fuzz run in every `make test`: mutants of the fixtures through inspect,
check and quantize, in-process. `make fuzz` runs the long campaign (`python -m tests.fuzz`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.models import fixture_bases
from tests.fuzz.tasks import model_tasks, run_task

MUTANTS = 300
SEED = 20251123
SLICES = 3  # test cases, so that a failure report stays short and xdist can share the work


@pytest.mark.parametrize("part", range(SLICES))
def test_mutants_of_the_fixtures_fail_cleanly(part: int, tmp_path: Path) -> None:
    tasks = model_tasks(fixture_bases(), MUTANTS, SEED)[part::SLICES]
    failures = []
    for task in tasks:
        for verdict in run_task(task, str(tmp_path), judge_input=False):
            failures += [
                f"{verdict.case} [{verdict.command}] {c}: {d}" for c, d in verdict.failures.items()
            ]
    assert not failures, "\n".join(failures[:20])


# Bounded samples of the hostile kinds of issue 21 (`make fuzz` runs thousands).
HOSTILE_SAMPLES = {"names": 4, "config": 24, "arguments": 24, "api": 80}


@pytest.mark.parametrize("kind", list(HOSTILE_SAMPLES))
def test_hostile_cases_fail_cleanly(kind: str, tmp_path: Path) -> None:
    from tests.fuzz.tasks import seeded_tasks

    failures = []
    for task in seeded_tasks(kind, HOSTILE_SAMPLES[kind], SEED):
        for verdict in run_task(task, str(tmp_path)):
            failures += [
                f"{verdict.case} [{verdict.command}] {c}: {d}" for c, d in verdict.failures.items()
            ]
    assert not failures, "\n".join(failures[:20])


def test_inputs_changed_during_a_run_fail_cleanly(tmp_path: Path, monkeypatch) -> None:
    from tests.fuzz import changing_cases
    from tests.fuzz.models import FIXTURE_MODELS

    monkeypatch.setattr(changing_cases, "DATA_BYTES", 16 << 20)
    failures = []
    for case in changing_cases.changing_cases(3, SEED):
        verdict = changing_cases.run_changing_case(
            case, FIXTURE_MODELS / "cnn.tflite", str(tmp_path)
        )
        failures += [f"{case.name} [{case.command}] {c}: {d}" for c, d in verdict.failures.items()]
    assert not failures, "\n".join(failures)
