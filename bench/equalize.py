"""Cross-layer equalization (the default) against `--no-equalize` on the MediaPipe models: each
output's SQNR (dB) on held-out photographs, both models run in LiteRT, and the pairs rescaled.

    python -m bench.equalize [MODEL ...]
"""

from __future__ import annotations

import argparse
import statistics

from rich.table import Table

from bench.accuracy import console, run
from bench.real_models import MODELS

COLUMNS = (("--no-equalize", {"equalize": False}), ("default (equalized)", {}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    names = parser.parse_args().models
    table = Table(title="worst output SQNR (dB) on held-out photographs, LiteRT kernels")
    for column in ("model", *(c for c, _ in COLUMNS), "gain", "per output (off -> on)"):
        table.add_column(column, justify="right")
    gains = []
    for name in names:
        before, after = (run(name, options) for _, options in COLUMNS)
        gains.append(after.worst - before.worst)
        outputs = ", ".join(
            f"{b:.1f}->{a:.1f}" for b, a in zip(before.outputs, after.outputs, strict=True)
        )
        row = [name, f"{before.worst:.2f}", f"{after.worst:.2f}", f"{gains[-1]:+.2f}", outputs]
        console.print(" | ".join(row))
        table.add_row(*row)
    console.print(table)
    console.print(f"median gain {statistics.median(gains):+.2f} dB, worst {min(gains):+.2f} dB")


if __name__ == "__main__":
    main()
