"""Names chosen to attack whoever reads qtool's output: terminal escape sequences, rich markup,
forged log lines and CI workflow commands, in tensor, subgraph and signature names and in file
names; a pseudo-terminal to see what a person would see; and the judge of what came out.

A name must come out as data: shown with its control characters escaped, never acting on the
terminal (clearing it, hiding text, setting its title, opening a link), never read as markup,
never starting a line of its own.
"""

from __future__ import annotations

import os
import pty
import random
import re
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from qtool.model import load_model, save_model

# What each payload would do if it reached a terminal or a log raw.
PAYLOADS = {
    "clear": "\x1b[2J\x1b[H",
    "fake_summary": "\n\x1b[32mforged.tflite: 0 errors, 0 warnings, 0 info\x1b[0m",
    "conceal": "\x1b[8m",
    "hyperlink": "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "title": "\x1b]0;pwned\x07",
    "c1_csi": "\x9b31m",
    "bidi": "\u202eexe.tflite",
    "markup_close": "[/]",
    "markup_link": "[link=https://evil.example/]x[/link]",
    "markup_style": "[bold red on white]",
    "workflow_command": "\n::error file=x.py,line=1::forged",
    "carriage_return": "\rqtool: 0 errors",
    "backspace": "abc\b\b\b",
}

# Bytes that must never appear in output: each is a payload's active part.
FORBIDDEN = {
    "ESC clear": b"\x1b[2J",
    "ESC conceal": b"\x1b[8m",
    "OSC (link, title)": b"\x1b]",
    "BEL": b"\x07",
    "C1 CSI": "\x9b".encode(),
    "bidi override": "\u202e".encode(),
    "backspace": b"\x08",
    "carriage return before a forged line": b"\rqtool: 0 errors",
}
# rich's own styles are SGR sequences; anything else from ESC is a payload's (or a progress
# bar's cursor moves, on a terminal).
_ESCAPE = re.compile(rb"\x1b(\[[0-9;?]*[A-Za-z]|.)")
_SGR = re.compile(rb"\x1b\[([0-9;]*)m")
_PROGRESS_MOVES = re.compile(rb"\x1b\[(\?25[lh]|2K|[0-9]*[ABCDG])")


def _conceals(parameters: bytes) -> bool:
    """Whether an SGR sequence's parameters hide text (8), colour arguments skipped."""
    values = [int(v) if v else 0 for v in parameters.split(b";")]
    position = 0
    while position < len(values):
        value = values[position]
        if value in (38, 48, 58):  # a colour: 5;N or 2;R;G;B follow
            following = values[position + 1] if position + 1 < len(values) else 0
            position += 3 if following == 5 else 5
            continue
        if value == 8:
            return True
        position += 1
    return False


def hostile_name(rng: random.Random, base: str = "t") -> str:
    """A name mixing one to three payloads with ordinary text."""
    parts = rng.sample(sorted(PAYLOADS.values()), rng.randint(1, 3))
    return base + "".join(parts)


def hostile_model(source: Path, target: Path, rng: random.Random) -> Path:
    """`source` with every tensor, subgraph and signature name replaced by a hostile one."""
    model = load_model(source)
    for s, subgraph in enumerate(model.subgraphs):
        subgraph.name = hostile_name(rng, f"sg{s}")
        for t, tensor in enumerate(subgraph.tensors):
            tensor.name = hostile_name(rng, f"t{t}")
    for signature in model.signature_defs:
        for entry in (signature["inputs"] or []) + (signature["outputs"] or []):
            tensor = model.subgraphs[signature["subgraph_index"]].tensors[entry["tensor_index"]]
            entry["name"] = tensor.name
    save_model(model, target)
    return target


def hostile_file_name(rng: random.Random, suffix: str = ".tflite") -> str:
    """A file name (no `/` or NUL: the file system refuses those) made of payloads."""
    name = hostile_name(rng, "m").replace("/", "_")
    return name[:200] + suffix


@dataclass
class Output:
    code: int
    data: bytes  # everything written to the terminal (stdout and stderr together)
    hung: bool = False


def run_in_terminal(argv: list[str], cwd: Path, timeout: float = 300) -> Output:
    """`python -m qtool ARGV` with stdout and stderr on a pseudo-terminal, as a person runs it."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "qtool", *argv],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the other side closed: the program ended
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            elif process.poll() is not None:
                break
    finally:
        os.close(master)
    try:
        code = process.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return Output(-1, b"".join(chunks), hung=True)
    return Output(code, b"".join(chunks))


def run_piped(argv: list[str], cwd: Path, timeout: float = 300) -> Output:
    """The same with stdout and stderr to a pipe (a CI log)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "qtool", *argv],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        return Output(-1, exc.stdout or b"", hung=True)
    return Output(done.returncode, done.stdout)


def injected(data: bytes, terminal: bool) -> list[str]:
    """What in `data` a payload put there: forbidden bytes, escape sequences that are not
    rich's own, and in a log (not a terminal) a line a payload started or a stray carriage
    return (a terminal's line discipline and rich's progress bar write those themselves)."""
    problems = [f"{what} {pattern!r}" for what, pattern in FORBIDDEN.items() if pattern in data]
    for match in _ESCAPE.finditer(data):
        sequence = match.group(0)
        style = _SGR.fullmatch(sequence)
        if not terminal or not (style or _PROGRESS_MOVES.fullmatch(sequence)):
            problems.append(f"escape sequence {sequence!r}")
            break
        if style and _conceals(style.group(1)):
            problems.append(f"conceal {sequence!r}")
            break
    text = data.decode("utf-8", "replace")
    if not terminal:
        if "\r" in text:
            problems.append("carriage return")
        for line in text.splitlines():
            if line.startswith(("::", "qtool: 0 errors", "forged.tflite")):
                problems.append(f"forged line {line[:80]!r}")
    if "Traceback" in text or "internal error" in text or "MarkupError" in text:
        problems.append("a traceback or an internal error")
    return problems
