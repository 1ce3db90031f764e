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
