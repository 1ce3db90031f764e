"""Hostile cases of issue 21 for the campaign: names in every output format and in a terminal,
configuration files, and file names that become arguments. Each case is made from a seed, run
in-process (a terminal run in a pseudo-terminal) and judged:

- names: a fixture whose every name (and the file's) holds payloads (`hostile_names.py`),
  through check in each format, inspect and quantize; nothing a payload holds may act on a log
  or a terminal, and every report must still parse (JSON, SARIF, JUnit XML).
- config: a tree with a hostile pyproject.toml above the git work tree and a random one in the
  project (safe keys, keys that run code or name files, ignores, a baseline in or out of the
  project, broken TOML); no code may run, no file change that the command line did not name,
  a refused key is one error line naming it, applied settings are named on stderr, and what
  `ignore` leaves out is recorded as suppressed.
- arguments: staged files named like options, passed as pre-commit passes them (the hook's
  entry and args, then the names) or after `--`: the broken model must still fail, nothing be
  written, nothing run.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.fuzz.hostile_names import (
    PAYLOADS,
    hostile_file_name,
    hostile_model,
    injected,
    run_in_terminal,
)
from tests.fuzz.judge import Verdict, judge_streams, run_cli, snapshot
from tests.fuzz.models import FIXTURE_DATA, FIXTURE_MODELS, TIMEOUT

INT8 = FIXTURE_MODELS / "tf_int8"
NAME_BASES = ["mlp_int8", "cnn_int8", "multi_io_int8", "spec_ops_int8", "mixed_ops_int8"]
FORMATS = (["--format", "text"], ["--format", "json"], ["--format", "junit"], ["--format", "sarif"])


def _case_dir(workdir: str, prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))


def _run_in(directory: Path, argv: list[str]):
    """`qtool ARGV` in-process, from `directory` (where settings are looked for)."""
    previous = os.getcwd()
    os.chdir(directory)
    try:
        return run_cli(argv, TIMEOUT)
    finally:
        os.chdir(previous)


# --------------------------------------------------------------------------- names


def _parses(fmt: str, text: str) -> str | None:
    """Why a report does not parse as its format, or None."""
    try:
        if fmt in ("json", "sarif"):
            json.loads(text)
        elif fmt == "junit":
            ET.fromstring(text)
    except (ValueError, ET.ParseError) as exc:
        return f"{fmt} report does not parse: {exc}"
    return None


def run_names_case(seed: int, workdir: str) -> list[Verdict]:
    rng = random.Random(seed)
    directory = _case_dir(workdir, "names-")
    verdicts = []
    try:
        base = rng.choice(NAME_BASES)
        model = hostile_model(INT8 / f"{base}.tflite", directory / "m.tflite", rng)
        named = directory / hostile_file_name(rng)
        shutil.copy(model, named)
        runs = [["check", *rng.choice(FORMATS), str(named)], ["check", "-q", str(named)]]
        runs += [["inspect", "--ops", str(named)], ["inspect", "--json", str(named)]]
        runs += [["check", "--format", "sarif", "-o", str(directory / "r.sarif"), str(named)]]
        runs += [["check", "--target", rng.choice(["tflm", "xnnpack"]), str(named)]]
        for argv in runs:
            verdict = Verdict(f"names {base} seed {seed}", " ".join(argv[:3]))
            result = run_cli(argv, TIMEOUT)
            judge_streams(verdict, result, check=argv[0] == "check")
            for problem in injected((result.stdout + result.stderr).encode(), terminal=False):
                verdict.fail("untidy", f"a name acted on the log: {problem}")
            fmt = argv[argv.index("--format") + 1] if "--format" in argv else "text"
            text = (directory / "r.sarif").read_text() if "-o" in argv else result.stdout
            problem = _parses(fmt if "--json" not in argv else "json", text)
            if problem and result.code in (0, 1):
                verdict.fail("invalid", problem)
            verdict.succeeded = result.code in (0, 1)
            verdicts.append(verdict)
        if seed % 4 == 0:  # a quarter also on a terminal (a process each: slower)
            argv = rng.choice([["check", named.name], ["inspect", "--ops", named.name]])
            verdict = Verdict(f"names {base} seed {seed}", f"{argv[0]} (terminal)")
            output = run_in_terminal(argv, directory, timeout=TIMEOUT)
            if output.hung:
                verdict.fail("hang", "did not finish on the terminal")
            elif output.code < 0:
                verdict.fail("crash", f"killed by signal {-output.code}")
            for problem in injected(output.data, terminal=True):
                verdict.fail("untidy", f"a name acted on the terminal: {problem}")
            verdict.succeeded = output.code in (0, 1)
            verdicts.append(verdict)
        return verdicts
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# --------------------------------------------------------------------------- config

EVIL = "from pathlib import Path\nPath(__file__).with_name('PWNED').write_text('ran')\n"
EVIL += "def gen():\n    import numpy as np\n    yield [np.zeros((1, 32), np.float32)]\n"
# Keys a file may not set, with a value; and keys it may.
REFUSED = {
    "check": {
        "reference": '"float.tflite"',
        "data": '["evil.py:gen"]',
        "output": '"victim.txt"',
        "write-baseline": '"victim.txt"',
        "baseline": '"../outside.json"',
    },
    "quantize": {
        "data": '["evil.py:gen"]',
        "custom-ops": '"evil"',
        "output": '"victim.txt"',
        "report": '"victim.txt"',
        "html": '"victim.txt"',
        "force": "true",
        "statistics": '["victim.txt"]',
        "holdout": '["evil.py:gen"]',
    },
}
SAFE = {
    "check": {
        "fail-on": ['"warning"', '"error"'],
        "target": ['"tflm"', '"xnnpack"'],
        "per-tensor-fc": ["true", "false"],
        "min-sqnr": ["25.0"],
        "quiet": ["true"],
        "ignore": ['["*"]', '["QT-WEIGHT-*"]', '["QT-BIAS-*:path:*"]', '["QT-*:tensor:*"]'],
    },
    "quantize": {"samples": ["8"], "io": ['"int8"'], "calibration": ['"minmax"']},
}


def _config_text(rng: random.Random, command: str) -> tuple[str, set[str], bool]:
    """A [tool.qtool.COMMAND] table: its text, the refused keys in it, and whether it is
    broken TOML."""
    if rng.random() < 0.1:
        return f"[tool.qtool.{command}\nfail-on = ", set(), True
    keys = rng.sample(sorted(SAFE[command]), rng.randint(0, len(SAFE[command])))
    lines = [f"{key} = {rng.choice(SAFE[command][key])}" for key in keys]
    refused = set()
    if rng.random() < 0.6:
        key = rng.choice(sorted(REFUSED[command]))
        lines.insert(rng.randint(0, len(lines)), f"{key} = {REFUSED[command][key]}")
        refused.add(key)
    return f"[tool.qtool.{command}]\n" + "\n".join(lines) + "\n", refused, False


def run_config_case(seed: int, workdir: str) -> list[Verdict]:
    rng = random.Random(seed)
    root = _case_dir(workdir, "config-")
    command = "check" if rng.random() < 0.75 else "quantize"
    verdict = Verdict(f"config seed {seed}", command)
    try:
        from tests.check.conftest import write_model_files

        for tree in (root, root / "repo"):
            (tree / "evil.py").parent.mkdir(parents=True, exist_ok=True)
            (tree / "evil.py").write_text(EVIL)
            (tree / "victim.txt").write_text("precious")
        # Above the work tree: every refused key, which must never be read.
        hostile = "\n".join(f"{k} = {v}" for k, v in REFUSED[command].items())
        (root / "pyproject.toml").write_text(f"[tool.qtool.{command}]\n{hostile}\n")
        project = root / "repo"
        (project / ".git").mkdir()
        work = project / "models" if rng.random() < 0.5 else project
        work.mkdir(exist_ok=True)
        files = write_model_files(root)
        shutil.copy(
            files["errors"] if command == "check" else FIXTURE_MODELS / "mlp.tflite",
            work / "m.tflite",
        )
        shutil.copy(FIXTURE_MODELS / "mlp.tflite", project / "float.tflite")
        text, refused, broken = _config_text(rng, command)
        with_config = rng.random() < 0.8
        if with_config:
            (project / "pyproject.toml").write_text(text)
        argv = [command, "m.tflite"]
        if command == "quantize":
            argv += ["--data", str(FIXTURE_DATA / "mlp_calib.npz"), "-o", "q.tflite", "--quiet"]
        fmt = rng.choice(["text", "json"]) if command == "check" else "text"
        argv += ["--format", fmt] if command == "check" else []
        isolated = rng.random() < 0.15
        argv += ["--isolated"] if isolated else []
        before = snapshot(root)
        result = _run_in(work, argv)
        judge_streams(verdict, result, check=command == "check")
        applies = with_config and not isolated
        _judge_config(verdict, result, refused if applies else set(), broken and applies, fmt)
        if str(root / "pyproject.toml") in result.stderr:
            verdict.fail("invalid", "the pyproject.toml above the work tree was read")
        after = snapshot(root)
        if (root / "PWNED").exists() or (project / "PWNED").exists():
            verdict.fail("invalid", "a pyproject.toml ran code")
        allowed = {
            "repo/q.tflite",
            "repo/q.report.json",
            "repo/models/q.tflite",
            "repo/models/q.report.json",
        }
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        if changed - allowed:
            verdict.fail("files", f"touched {sorted(changed - allowed)}")
        verdict.succeeded = result.code in (0, 1)
        return [verdict]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _judge_config(verdict: Verdict, result, refused: set[str], broken: bool, fmt: str) -> None:
    lines = result.stderr.splitlines()
    if refused or broken:
        if result.code != 2:
            verdict.fail(
                "invalid", f"a refused key or broken TOML was accepted (exit {result.code})"
            )
        elif refused and not any(f"]: {key} " in lines[-1] for key in refused):
            verdict.fail("unexpected", f"the error names no refused key: {lines[-1:]}")
        return
    if fmt == "json" and result.code in (0, 1) and "ignore" in result.stderr:
        report = json.loads(result.stdout)
        if report["summary"]["suppressed"] != sum(len(m["suppressed"]) for m in report["models"]):
            verdict.fail("invalid", "suppressed findings are not all recorded")


# --------------------------------------------------------------------------- arguments

OPTION_NAMES = [
    "--ignore=QT-*:*.tflite",
    "--ignore=*",
    "-o.tflite",
    "-ox.tflite",
    "--output=x.tflite",
    "--format=junit.tflite",
    "--fail-on=warning.tflite",
    "-q.tflite",
    "--quiet.tflite",
    "--write-baseline=b.tflite",
    "--baseline=b.tflite",
    "--reference=r.tflite",
    "--data=evil.py:gen.tflite",
    "--list-rules.tflite",
    "--help.tflite",
    "--version.tflite",
    "--isolated.tflite",
    "--debug.tflite",
    "-.tflite",
    "--.tflite",
]


def run_arguments_case(seed: int, workdir: str) -> list[Verdict]:
    rng = random.Random(seed)
    directory = _case_dir(workdir, "args-")
    try:
        from qtool.model import load_model, save_model
        from tests.check.conftest import write_model_files

        (directory / "evil.py").write_text(EVIL)
        broken = directory / "broken.tflite"
        save_model(load_model(write_model_files(directory)["errors"]), broken)
        staged = rng.sample(OPTION_NAMES, rng.randint(1, 4))
        for name in staged:
            (directory / name).write_bytes(b"")
        names = [*staged, "broken.tflite"]
        rng.shuffle(names)
        route = rng.choice(["hook", "check --", "inspect --"])
        if route == "hook":
            import shlex

            import yaml

            from tests.conftest import ROOT

            hook = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())[0]
            argv = [*shlex.split(hook["entry"])[1:], *hook.get("args", []), *names]
        elif route == "check --":
            argv = ["check", "--", *names]
        else:
            argv = ["inspect", "--", rng.choice(names)]
        verdict = Verdict(f"arguments seed {seed}", route)
        before = snapshot(directory)
        result = _run_in(directory, argv)
        judge_streams(verdict, result, check=argv[0] == "check")
        if (directory / "PWNED").exists():
            verdict.fail("invalid", "a file name ran code")
        if snapshot(directory) != before:
            verdict.fail("files", "a file name made qtool write")
        if argv[0] == "check":
            if result.code == 0:
                verdict.fail("invalid", "the broken model passed")
            if "broken.tflite: 1 error" not in result.stdout:
                verdict.fail("unexpected", "the broken model's findings are missing")
        elif argv[-1] != "broken.tflite" and result.code != 2:
            verdict.fail("unexpected", f"an empty file named like an option: exit {result.code}")
        verdict.succeeded = result.code in (0, 1)
        return [verdict]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


__all__ = ["PAYLOADS", "run_arguments_case", "run_config_case", "run_names_case"]
