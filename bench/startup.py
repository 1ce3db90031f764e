"""Start-up: import time of `qtool --help` and of `qtool check` on a small model.

Measured with `python -X importtime` in fresh interpreters (best and median of several runs, as
the machine is shared; CPU time is the whole process's, least disturbed by other load), next to
`import numpy` timed the same way as the baseline: the target (issue 11) is under 0.1 s of import
time. tests/cli/test_startup.py keeps a budget of modules instead of
timing anything.
"""

from __future__ import annotations

import compileall
import re
import resource
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
SMALL_MODEL = ROOT / "fixtures" / "models" / "tf_int8" / "cnn_int8.tflite"
SCENARIOS = {
    "qtool --help": ["-m", "qtool", "--help"],
    "qtool check (small model)": ["-m", "qtool", "check", str(SMALL_MODEL)],
    "baseline: import numpy": ["-c", "import numpy"],
    "baseline: python -c pass": ["-c", "pass"],
}
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


@dataclass(frozen=True)
class ImportProfile:
    seconds: float  # import time after interpreter start-up (everything `site` did excluded)
    modules: tuple[str, ...]  # modules imported after start-up, in order
    cpu_seconds: float  # CPU time of the whole process (less disturbed by a busy machine)


def import_profile(args: list[str], cwd: Path = ROOT) -> ImportProfile:
    """Run `python -X importtime ARGS` and read what it imported after the interpreter's own
    start-up (encodings, site and the .pth files of the environment)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )
    after_run = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after_run.ru_utime - before.ru_utime) + (after_run.ru_stime - before.ru_stime)
    entries = [m.groups() for m in map(_LINE.match, run.stderr.splitlines()) if m]
    top_level = [i for i, (_, _, indent, _) in enumerate(entries) if not indent]
    site_end = next(i for i in top_level if entries[i][3] == "site") + 1
    after = entries[site_end:]
    return ImportProfile(
        seconds=sum(int(cumulative) for _, cumulative, indent, _ in after if not indent) / 1e6,
        modules=tuple(name for *_, name in after),
        cpu_seconds=cpu,
    )


def bench_startup(repeats: int = 7) -> None:
    # An installed wheel has its bytecode compiled (pip does it); a checkout run with
    # PYTHONDONTWRITEBYTECODE would compile qtool's sources on every start instead.
    compileall.compile_dir(ROOT / "qtool", quiet=1)
    table = Table(
        title=f"start-up: import time ({repeats} runs; x numpy: median over numpy's median; "
        "CPU: best, whole process)",
        title_justify="left",
    )
    table.add_column("command")
    for column in ("best ms", "median ms", "x numpy", "CPU ms", "modules"):
        table.add_column(column, justify="right", no_wrap=True)
    profiles = {
        name: [import_profile(args) for _ in range(repeats)] for name, args in SCENARIOS.items()
    }
    medians = {name: statistics.median(p.seconds for p in runs) for name, runs in profiles.items()}
    numpy = medians["baseline: import numpy"]
    for name, runs in profiles.items():
        table.add_row(
            name,
            f"{min(p.seconds for p in runs) * 1000:.1f}",
            f"{medians[name] * 1000:.1f}",
            f"{medians[name] / numpy:.2f}",
            f"{min(p.cpu_seconds for p in runs) * 1000:.0f}",
            str(len(runs[0].modules)),
        )
    Console().print(table)


if __name__ == "__main__":
    bench_startup()
