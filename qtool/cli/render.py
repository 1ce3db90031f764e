"""Shared console helpers for the commands: one stdout console, one stderr console, JSON output."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

stdout = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no rich markup), so pipelines can parse it."""
    print(json.dumps(data, indent=2, sort_keys=False))
