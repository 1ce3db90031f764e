"""Running the installed console script the way a user's shell does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.cli.test_conventions import QTOOL_SCRIPT


def run_script(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`qtool ARGS` (the console script pip installed) run in `cwd`, with no PYTHONPATH."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    return subprocess.run(
        [str(QTOOL_SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
