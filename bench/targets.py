"""`qtool check --target` timing: placement of every op on each target, on the largest model.

The target (issue 13): placement stays under 0.1 s per 10 MB of model. The audit without a target
is timed in the same run as the baseline.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.timing import best_of
from qtool.check.audit import audit_model
from qtool.model import load_model
from qtool.targets import target_names
from qtool.targets.placement import place_model

console = Console()


def bench_targets(largest_model) -> None:
    """Time place_model per target on the model `largest_model(directory)` writes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = largest_model(Path(tmp))
        size_mb = path.stat().st_size / 1e6
        model = load_model(path)
        audit = best_of(lambda: audit_model(model))
        table = Table(title=f"check --target on a {size_mb:.1f} MB model (best of 3)")
        for column in ("target", "placement s", "s per 10 MB", "audit+target s", "vs audit"):
            table.add_column(column, justify="right")
        for name in target_names():
            placement = best_of(lambda name=name: place_model(model, name))
            total = best_of(lambda name=name: audit_model(model, target=name))
            table.add_row(
                name,
                f"{placement:.4f}",
                f"{placement * 10 / size_mb:.4f}",
                f"{total:.4f}",
                f"{total / audit:.2f}x",
            )
        console.print(table)
        console.print("target: placement under 0.1 s per 10 MB")
