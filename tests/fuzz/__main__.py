"""`make fuzz`: the long robustness campaign, with its table of failures.

    python -m tests.fuzz [--mutants 10000] [--seed 1] [--workers 2] [--process-cases 60]

Model mutants (structured and byte-level) of the fixtures and of the MediaPipe models that
`bench/real_models.py` fetches go through inspect (text and JSON), check and quantize; then every
bad-data case, every output-path case, the hostile kinds of issue 21 (names in every format and
on a terminal, pyproject.toml files, file names as arguments, API probes: `hostile_cases.py`,
`api_cases.py`, a number of each in proportion to --mutants), and process cases (signals, a full
disk, inputs changed during a run: `changing_cases.py`, as many as --process-cases). It prints
one row per kind of case and the distinct places where something went wrong, and exits 1 if
any run failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from collections.abc import Iterable

from tests.fuzz.judge import CATEGORIES, Verdict
from tests.fuzz.models import fixture_bases, real_bases
from tests.fuzz.pool import Pool
from tests.fuzz.process_cases import process_cases, run_process_case
from tests.fuzz.tasks import (
    all_data_tasks,
    all_option_tasks,
    all_output_tasks,
    model_tasks,
    seeded_tasks,
)

HEADERS = {
    "traceback": "tracebacks",
    "hang": "hangs",
    "crash": "crashes",
    "files": "outputs left behind or lost",
    "invalid": "invalid reported as success",
    "untidy": "untidy stderr",
    "unexpected": "unexpected exit",
}


class Tally:
    def __init__(self) -> None:
        self.rows: dict[str, collections.Counter] = {}
        self.cases: collections.Counter = collections.Counter()
        self.sites: dict[tuple[str, str], list[str]] = {}
        self.refused_inputs: list[str] = []

    def add(self, row: str, verdicts: list[Verdict]) -> None:
        counts = self.rows.setdefault(row, collections.Counter())
        self.cases[row] += 1
        for verdict in verdicts:
            counts["runs"] += 1
            counts["succeeded"] += verdict.succeeded
            if verdict.litert_refuses_input:
                self.refused_inputs.append(verdict.case)
            for category, detail in verdict.failures.items():
                counts[category] += 1
                site = verdict.site if category == "traceback" and verdict.site else detail[:160]
                key = (category, site)
                self.sites.setdefault(key, []).append(f"{verdict.case} [{verdict.command}]")

    def failed(self) -> bool:
        return any(c[k] for c in self.rows.values() for k in CATEGORIES) or any(
            c["harness"] for c in self.rows.values()
        )

    def table(self) -> str:
        columns = ["cases", "runs", *HEADERS.values()]
        lines = ["| kind | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
        total = collections.Counter()
        for row, counts in self.rows.items():
            values = [self.cases[row], counts["runs"], *(counts[c] for c in HEADERS)]
            lines.append(f"| {row} | " + " | ".join(f"{v:,}" for v in values) + " |")
            total.update({"cases": self.cases[row], "runs": counts["runs"]})
            total.update({c: counts[c] for c in HEADERS})
        values = [total["cases"], total["runs"], *(total[c] for c in HEADERS)]
        lines.append("| **total** | " + " | ".join(f"**{v:,}**" for v in values) + " |")
        return "\n".join(lines)

    def site_list(self) -> str:
        lines = []
        ordered = sorted(self.sites.items(), key=lambda item: (item[0][0], -len(item[1])))
        for (category, site), examples in ordered:
            lines.append(f"{category:10s} {len(examples):5d}  {site}")
            lines.append(f"{'':17s}e.g. {examples[0]}")
        return "\n".join(lines)


def _consume(pool: Pool, tasks: list[tuple], tally: Tally, label, progress: bool) -> None:
    started = time.monotonic()
    for done, (task, verdicts) in enumerate(pool.run(tasks), start=1):
        tally.add(label(task), verdicts)
        if progress and (done % 250 == 0 or done == len(tasks)):
            rate = done / max(time.monotonic() - started, 1e-9)
            print(f"  {done:,}/{len(tasks):,} tasks ({rate:.1f}/s)", file=sys.stderr, flush=True)
    if progress:  # the table so far, in case a later phase never ends
        print(tally.table(), file=sys.stderr, flush=True)


def _model_label(task: tuple) -> str:
    base, mode = task[1], task[3]
    return f"{'MediaPipe' if base.real else 'fixture'} models, {mode} mutants"


def _data_label(task: tuple) -> str:
    route = {"data": "quantize --data", "holdout": "quantize --holdout"}.get(
        task[3], "analyze --data"
    )
    return f"bad calibration data, {route}"


def _option_label(task: tuple) -> str:
    return f"{task[1].split()[0]} options (--calibration, --target-sqnr, --int16, --holdout...)"


# The hostile kinds (issue 21): how many cases per 1,000 model mutants, and their table rows.
HOSTILE = {
    "names": (40, "hostile names, every format and a terminal"),
    "config": (60, "hostile pyproject.toml (parent and project)"),
    "arguments": (60, "file names as arguments (hook, --)"),
    "api": (200, "API probes"),
}


KINDS = ("models", "data", "output", "options", "process", *HOSTILE, "changing")


def run_campaign(
    mutants: int,
    seed: int,
    workers: int,
    process_count: int,
    kinds: tuple[str, ...] = KINDS,
    progress: bool = True,
) -> Tally:
    tally = Tally()
    bases_real, bases_fixture = real_bases(), fixture_bases()
    if not bases_real:
        print(
            "note: no MediaPipe models (python -m bench.real_models fetches them)", file=sys.stderr
        )
    with tempfile.TemporaryDirectory(prefix="qtool-fuzz-") as workdir:
        pool = Pool(workers, workdir)
        try:
            if "models" in kinds:
                real_share = mutants // 2 if bases_real else 0
                tasks = model_tasks(bases_fixture, mutants - real_share, seed)
                tasks += model_tasks(bases_real, real_share, seed + 1) if real_share else []
                tasks.sort(key=lambda t: t[2] % 7919)  # interleave slow and fast bases
                print(f"{len(tasks):,} model mutants", file=sys.stderr)
                _consume(pool, tasks, tally, _model_label, progress)
            if "data" in kinds:
                _consume(pool, all_data_tasks(), tally, _data_label, progress)
            if "output" in kinds:
                _consume(pool, all_output_tasks(), tally, lambda t: "output paths", progress)
            if "options" in kinds:
                _consume(pool, all_option_tasks(), tally, _option_label, progress)
            for kind, (per_thousand, label) in HOSTILE.items():
                if kind in kinds:
                    tasks = seeded_tasks(kind, max(1, mutants * per_thousand // 1000), seed)
                    _consume(pool, tasks, tally, lambda task, label=label: label, progress)
        finally:
            pool.close()
        if "process" in kinds:
            _run_processes(tally, bases_real, bases_fixture, process_count, seed, workdir, workers)
        if "changing" in kinds:
            _run_changing(tally, bases_real, bases_fixture, process_count, seed, workdir, workers)
    return tally


def _run_processes(tally, bases_real, bases_fixture, count, seed, workdir, workers) -> None:
    from concurrent.futures import ThreadPoolExecutor

    model = next((b.path for b in bases_real if b.name == "pose_detection"), None)
    model = model or next(b.path for b in bases_fixture if b.name == "cnn")
    cases = process_cases(model, count, seed)
    with ThreadPoolExecutor(workers) as executor:
        for verdict in executor.map(lambda c: run_process_case(c, workdir), cases):
            tally.add("signals and a full disk (processes)", [verdict])


def _run_changing(tally, bases_real, bases_fixture, count, seed, workdir, workers) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from tests.fuzz.changing_cases import changing_cases, run_changing_case

    model = next((b.path for b in bases_real if b.name == "pose_detection"), None)
    model = model or next(b.path for b in bases_fixture if b.name == "cnn")
    cases = changing_cases(count, seed)
    with ThreadPoolExecutor(workers) as executor:
        for verdict in executor.map(lambda c: run_changing_case(c, model, workdir), cases):
            tally.add("inputs changed during a run (processes)", [verdict])


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--mutants", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--process-cases", type=int, default=60)
    parser.add_argument("--kinds", default=",".join(KINDS), help="which kinds of case to run")
    args = parser.parse_args(list(argv) if argv is not None else None)
    started = time.monotonic()
    kinds = tuple(args.kinds.split(","))
    tally = run_campaign(args.mutants, args.seed, args.workers, args.process_cases, kinds)
    minutes = (time.monotonic() - started) / 60
    print(f"\nqtool robustness campaign, seed {args.seed}, {minutes:.1f} min\n")
    print(tally.table())
    refused = tally.refused_inputs
    print(f"\nquantized (exit 0) although LiteRT refuses the input: {len(refused)}")
    for case in refused[:20]:
        print(f"  {case}")
    if tally.sites:
        print("\ndistinct failures (category, count, where):")
        print(tally.site_list())
    return 1 if tally.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
