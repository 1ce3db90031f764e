"""Cases that need a real process: signals at random moments, and a disk that fills up.

`qtool quantize --force` runs over an existing model and report; it is sent SIGTERM, SIGINT or
SIGHUP after a random delay, or runs with a file-size limit (`RLIMIT_FSIZE`, what a full disk
looks like to a writer). Whatever happens, afterwards there is no temporary file, and the
directory holds either the old pair untouched or a complete new pair whose report names the
model's sha256.
"""

from __future__ import annotations

import hashlib
import json
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fuzz.judge import Verdict

ROOT = Path(__file__).resolve().parents[2]
OLD_MODEL, OLD_REPORT = b"previous model", '{"previous": true}'


@dataclass(frozen=True)
class ProcessCase:
    name: str
    model: Path
    signal: int | None  # sent after `delay` seconds
    delay: float
    file_limit: int | None  # RLIMIT_FSIZE in bytes


def process_cases(model: Path, count: int, seed: int) -> list[ProcessCase]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        if i % 5 == 4:
            limit = rng.choice((0, 1, 100, 4096, 20_000, 60_000))
            cases.append(ProcessCase(f"file size limit {limit}", model, None, 0.0, limit))
        else:
            number = rng.choice((signal.SIGTERM, signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
            delay = round(rng.uniform(0.0, 3.5), 2)
            name = f"{signal.Signals(number).name} after {delay} s"
            cases.append(ProcessCase(name, model, number, delay, None))
    return cases


def _limit(size: int) -> None:  # pragma: no cover - runs in the child before exec
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def run_process_case(case: ProcessCase, workdir: str) -> Verdict:
    verdict = Verdict(case.name, "quantize (process)")
    directory = Path(tempfile.mkdtemp(prefix="proc-", dir=workdir))
    out, report = directory / "m.tflite", directory / "m.report.json"
    out.write_bytes(OLD_MODEL)
    report.write_text(OLD_REPORT)
    argv = [sys.executable, "-m", "qtool", "quantize", str(case.model), "--synthetic"]
    argv += ["--samples", "16", "-o", str(out), "--force", "--quiet"]
    limit = case.file_limit
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=None if limit is None else (lambda: _limit(limit)),
    )
    if case.signal is not None:
        time.sleep(case.delay)
        if process.poll() is None:
            process.send_signal(case.signal)
    streams = wait_for(process, verdict, 300)
    if streams is not None:
        stderr = streams[1].decode(errors="replace")
        _judge(verdict, case, process.returncode, stderr, directory)
    return verdict


def wait_for(process: subprocess.Popen, verdict: Verdict, timeout: float) -> tuple[Any, Any] | None:
    """What the process wrote (stdout, stderr) once it ends; None, with a hang recorded in
    `verdict`, when it does not end in `timeout` seconds (it is killed)."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        verdict.fail("hang", f"did not finish in {timeout:g} s")
        return None


def _judge(verdict: Verdict, case: ProcessCase, code: int, stderr: str, directory: Path) -> None:
    out, report = directory / "m.tflite", directory / "m.report.json"
    if code < 0 and -code not in (case.signal, None):
        verdict.fail("crash", f"killed by signal {-code}")
    if "Traceback" in stderr or "internal error" in stderr:
        verdict.fail("traceback", stderr.strip().splitlines()[-1])
    others = sorted(p.name for p in directory.iterdir() if p not in (out, report))
    if others:
        verdict.fail("files", f"left behind: {others}")
    old = out.exists() and out.read_bytes() == OLD_MODEL
    old_report = report.exists() and report.read_text() == OLD_REPORT
    if old and old_report:
        if code == 0:
            verdict.fail("files", "exit 0 but the old files are still there")
        if case.file_limit is not None and code != 2:
            verdict.fail("unexpected", f"write failure gave exit {code}")
        return
    if old or old_report or not (out.exists() and report.exists()):
        verdict.fail("files", "the model and the report do not belong together")
        return
    try:
        recorded = json.loads(report.read_text())["output_model"]["sha256"]
    except (ValueError, KeyError):
        verdict.fail("files", "the new report is not complete JSON")
        return
    if recorded != hashlib.sha256(out.read_bytes()).hexdigest():
        verdict.fail("files", "the report's sha256 is not the model's")
    verdict.succeeded = code == 0
