"""The results and tables of bench/ort_peer.py: qtool's default against ONNX Runtime's best
calibrator per model, by worst-output SQNR, by worst-output fitting SQNR, and output by output by
the measure that fits each output's kind.

Kept apart from the runs so that it imports neither ONNX Runtime nor TensorFlow (tests read it).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from bench.real_models import MODELS
from qtool.numerics.measures import BOXES, CLASSES, DECIDED, REGRESSION
from qtool.quantize.accuracy import measures_text

console = Console(width=None if sys.stdout.isatty() else 160)
JUDGES = ("held-out", "development")  # the samples that judge (bench/ort_peer.py's --judge)

# The measure a user of each kind reads first, and whether it is an agreement (else an error).
MAIN_MEASURE = {
    **{kind: ("decision_agreement", True) for kind in DECIDED},
    CLASSES: ("top1_agreement", True),
    REGRESSION: ("relative_error", False),
    BOXES: ("relative_error", False),
}
RELATIVE_TIE = 0.01  # errors (disagreements) within 1% of each other tie
FIGURES = (("worst", "SQNR"), ("worst_fitting", "fitting SQNR"))


def _db(value: float | None) -> float:
    """A dB figure of an output record (None there: exact)."""
    return math.inf if value is None else float(value)


@dataclass
class MethodResult:
    """One quantizer's model of one float model: each output's record
    (`OutputAccuracy.to_dict()`, in the float model's output order)."""

    outputs: list[dict] = field(default_factory=list)
    seconds: float = 0.0  # the quantizer's wall time, calibration included
    error: str = ""
    choice: str = ""  # qtool's auto choice and its candidates' scores on the selection fold

    @property
    def worst(self) -> float:
        """The worst output's plain SQNR (dB)."""
        return min(_db(o["sqnr_db"]) for o in self.outputs)

    @property
    def worst_fitting(self) -> float:
        """The worst output's fitting SQNR (dB)."""
        return min(_db(o["fitting_sqnr_db"]) for o in self.outputs)


@dataclass
class ModelResult:
    """One model: qtool's default and each ORT setting, judged on the same samples."""

    name: str
    judge: str = JUDGES[0]
    float_onnx: dict[str, float] = field(default_factory=dict)  # float ONNX vs LiteRT, dB
    qtool: MethodResult = field(default_factory=MethodResult)
    methods: dict[str, MethodResult] = field(default_factory=dict)  # ORT's, by method
    error: str = ""  # running, converting or pre-processing the float model failed

    def best_by(self, figure: str) -> str | None:
        """ORT's method whose worst output is highest by `figure` (worst or worst_fitting)."""
        ranked = [name for name, result in self.methods.items() if not result.error]
        return max(ranked, key=lambda name: getattr(self.methods[name], figure), default=None)

    @property
    def best(self) -> str | None:
        """ORT's best method by worst-output SQNR."""
        return self.best_by("worst")

    def to_json(self) -> dict:
        """JSON-ready, with each method's worst figures and ORT's best per figure."""

        def method(m: MethodResult) -> dict:
            ok = not m.error and m.outputs
            return {
                "outputs": m.outputs,
                "seconds": m.seconds,
                "error": m.error,
                "choice": m.choice,
                "worst_db": m.worst if ok else None,
                "worst_fitting_db": m.worst_fitting if ok else None,
            }

        return {
            "name": self.name,
            "judge": self.judge,
            "error": self.error,
            "float_onnx": self.float_onnx,
            "qtool": method(self.qtool),
            "methods": {name: method(m) for name, m in self.methods.items()},
            "best": self.best,
            "best_fitting": self.best_by("worst_fitting"),
        }

    @classmethod
    def from_json(cls, row: dict) -> ModelResult:
        """The result `to_json` wrote."""

        def method(m: dict) -> MethodResult:
            return MethodResult(m["outputs"], m["seconds"], m["error"], m.get("choice", ""))

        return cls(
            row["name"],
            row["judge"],
            row["float_onnx"],
            method(row["qtool"]),
            {name: method(m) for name, m in row["methods"].items()},
            row["error"],
        )


def compare_measure(kind: str, ours: dict, theirs: dict) -> int:
    """+1 when qtool's output is better by its kind's main measure, -1 worse, 0 a tie: errors
    (a share of disagreement, or a relative error) within RELATIVE_TIE of each other."""
    name, agreement = MAIN_MEASURE[kind]
    a, b = ours["measures"].get(name), theirs["measures"].get(name)
    if a is None or b is None:  # not finite: an error of inf, say
        return 0 if a == b else (1 if b is None else -1)
    if agreement:
        a, b = 1.0 - a, 1.0 - b
    if abs(a - b) <= RELATIVE_TIE * max(a, b):
        return 0
    return 1 if a < b else -1


def measure_score(result) -> tuple[int, int, int]:
    """Outputs where qtool's main measure wins, ties and loses against ORT's best method by
    fitting SQNR."""
    best = result.best_by("worst_fitting")
    if best is None:
        return (0, 0, 0)
    theirs = result.methods[best].outputs
    found = [
        compare_measure(o["kind"], o, t) for o, t in zip(result.qtool.outputs, theirs, strict=True)
    ]
    return (found.count(1), found.count(0), found.count(-1))


def rows(results: Sequence) -> list[dict]:
    """Per model: qtool's figures, ORT's best method per figure with its figure, differences."""
    table = []
    for r in results:
        if r.error or not r.qtool.outputs:
            continue
        row = {"name": r.name, "development": MODELS[r.name].development}
        for figure, _ in FIGURES:
            best = r.best_by(figure)
            ours = getattr(r.qtool, figure)
            theirs = getattr(r.methods[best], figure) if best else None
            row[figure] = {
                "qtool": ours,
                "ort_method": best,
                "ort": theirs,
                "difference": None if theirs is None else ours - theirs,
            }
        row["measures"] = dict(zip(("wins", "ties", "losses"), measure_score(r), strict=True))
        table.append(row)
    return table


def summary(results: Sequence) -> dict:
    """Medians over the models (all, development, the others) of each figure: qtool's, ORT's
    best, and the per-model difference; the measure wins/ties/losses summed."""
    found: dict = {"models": rows(results)}
    groups = {
        "all": found["models"],
        "development": [r for r in found["models"] if r["development"]],
        "others": [r for r in found["models"] if not r["development"]],
    }
    for group, members in groups.items():
        compared = [r for r in members if r["worst"]["ort"] is not None]
        if not compared:
            continue
        found[group] = {"count": len(compared)}
        for figure, _ in FIGURES:
            found[group][figure] = {
                key: statistics.median(r[figure][key] for r in compared)
                for key in ("qtool", "ort", "difference")
            }
        found[group]["measures"] = {
            key: sum(r["measures"][key] for r in compared) for key in ("wins", "ties", "losses")
        }
    return found


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def _plain(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _pair(record: dict) -> str:
    """An output's plain and fitting SQNR (None in a record: exact)."""
    return "/".join(
        "inf" if record[key] is None else f"{record[key]:.2f}"
        for key in ("sqnr_db", "fitting_sqnr_db")
    )


def summary_table(results: Sequence) -> Table:
    table = Table(title="qtool default vs ORT's best calibrator per model: worst output (dB)")
    columns = ("model", "qtool SQNR", "ORT best", "SQNR", "diff")
    columns += ("qtool fitting", "ORT best", "fitting", "diff", "measure W/T/L")
    for column in columns:
        table.add_column(column, justify="left" if column in ("model", "ORT best") else "right")
    found = summary(results)
    for row in found["models"]:
        cells = [row["name"]]
        for figure, _ in FIGURES:
            f = row[figure]
            cells += [_plain(f["qtool"]), f["ort_method"] or "-", _plain(f["ort"])]
            cells.append(_signed(f["difference"]))
        cells.append("{wins}/{ties}/{losses}".format(**row["measures"]))
        table.add_row(*cells)
    for group in ("development", "others", "all"):
        if group not in found:
            continue
        g = found[group]
        cells = [f"median, {group} ({g['count']})"]
        for figure, _ in FIGURES:
            f = g[figure]
            cells += [_plain(f["qtool"]), "", _plain(f["ort"]), _signed(f["difference"])]
        cells.append("{wins}/{ties}/{losses}".format(**g["measures"]))
        table.add_row(*cells)
    return table


def methods_table(results: Sequence) -> Table:
    table = Table(title="worst output SQNR / fitting SQNR (dB), every method")
    methods = sorted({m for r in results for m in r.methods})
    for column in ("model", "qtool default", *methods, "float ONNX dB"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for r in results:
        if r.error:
            continue
        cells = [r.name, f"{r.qtool.worst:.2f} / {r.qtool.worst_fitting:.2f}"]
        for name in methods:
            m = r.methods.get(name)
            if m is None or m.error:
                cells.append("error" if m else "-")
            else:
                cells.append(f"{m.worst:.2f} / {m.worst_fitting:.2f}")
        cells.append(f"{min(r.float_onnx.values()):.1f}" if r.float_onnx else "-")
        table.add_row(*cells)
    return table


def outputs_table(results: Sequence) -> Table:
    table = Table(title="each output: qtool default vs ORT's best by fitting SQNR")
    columns = ("model", "output", "kind", "qtool SQNR/fit", "qtool measures", "ORT")
    for column in (*columns, "ORT SQNR/fit", "ORT measures"):
        table.add_column(column, justify="right" if "SQNR" in column else "left")
    for r in results:
        best = r.best_by("worst_fitting")
        if best is None:
            continue
        for ours, theirs in zip(r.qtool.outputs, r.methods[best].outputs, strict=True):
            table.add_row(
                r.name,
                ours["name"],
                ours["kind"],
                _pair(ours),
                measures_text(ours["measures"]),
                best,
                _pair(theirs),
                measures_text(theirs["measures"]),
            )
    return table


def show(results: Sequence) -> None:
    """Print the tables and every failure."""
    for table in (summary_table(results), methods_table(results), outputs_table(results)):
        console.print(table)
    for r in results:
        console.print(f"{r.name}: qtool chose {r.qtool.choice or '-'}")
        if r.error:
            console.print(f"{r.name}: ORT did not quantize it: {r.error}")
        for method, m in r.methods.items():
            if m.error:
                console.print(f"{r.name} {method}: failed: {m.error}")
