"""How the auto choice's rule and candidates would fare, studied on the development crops of the
MediaPipe models against ONNX Runtime's best calibrator (bench/ort_peer.py), without re-running
ORT or qtool once per rule.

Per model, every candidate recipe (METHODS, bias correction on and off) is fitted three times
on the calibration crops without the estimate fold (`qtool.calibrate.collect.fold_of`), each
time leaving out one of three folds of 16 crops (the selection fold and the fitting fold's two
halves) and judged on it in LiteRT; and once on all 64 calibration crops, judged on the judging
crops. A rule reads only the fold scores to choose a recipe; the chosen recipe's judged figures
are then compared with ORT's best of four and of seven settings, taken from an earlier
`bench.ort_peer --json` on the same judging crops. Rules: which folds count ("S": the selection
fold alone; "two": the selection fold and the first half of the fitting fold; "three": all
three), how they combine (the worse, or the mean), and which candidates take part.

    V=/work/bench-cache/ortvenv/bin/python   # any venv with qtool and scikit-image
    QTOOL_BENCH_CACHE=/work/bench-cache $V -m bench.ort_peer --all --judge development \\
        --json build/ort_dev.json
    QTOOL_BENCH_CACHE=/work/bench-cache python -m bench.choice_rules --ort-json build/ort_dev.json

The fold scores are written to `--scores` (JSON lines, one model a line) as each model ends,
and read from it instead of measured with `--scores-only`. Measuring the 13 models takes about
40 minutes on 2 cores. Only the development crops should judge here: the held-out photographs
judge the rule once it is chosen (bench/ort_peer.py).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from collections.abc import Callable, Sequence
from itertools import product
from pathlib import Path

import numpy as np

from bench.real_models import MODELS, make_data, make_development_data, model_path
from qtool.calibrate.collect import ESTIMATE, FIT, SELECTION, EvaluationSet, collect, fold_of
from qtool.calibrate.datasets import Dataset
from qtool.calibrate.ranges import Method
from qtool.model import load_model
from qtool.quantize import QuantizeOptions
from qtool.quantize.evaluation import CAP_DB, PlanAccuracy
from qtool.quantize.planner import Recipe
from qtool.quantize.quantizer import calibrate_loaded
from qtool.runtime import Engine

METHODS = (
    Method("minmax"),
    Method("percentile", 99.99),
    Method("mse"),
    Method("percentile", 99.995),
    Method("percentile", 99.999),
    Method("percentile", 99.95),
    Method("kl"),
)
FOLDS = ("S", "A", "B")  # the selection fold, the fitting fold's two halves
FOUR = ("MinMax", "Entropy", "Percentile", "Distribution")  # ORT's methods at their defaults
DEFAULT_SCORES = Path("build/choice_rules.jsonl")


def label(recipe: Recipe) -> str:
    return f"{recipe.method}{'+bc' if recipe.bias_correction else ''}"


def figures(accuracy: PlanAccuracy) -> dict[str, float]:
    """The worst output's fitting and plain SQNR (dB)."""
    return {
        "fitting": min(o.fitting_db for o in accuracy.outputs),
        "plain": min(o.sqnr_db for o in accuracy.outputs),
    }


def measure(name: str) -> dict:
    """Every candidate's fold scores and judged figures for one model."""
    calibration_path, _ = make_data(name)
    calibration = np.load(calibration_path)
    judged = np.load(make_development_data(name))
    calibrated = calibrate_loaded(
        load_model(model_path(name)), Dataset.from_arrays([calibration]), QuantizeOptions()
    )
    model, planner = calibrated.prepared.model, calibrated.planners[0]
    index = np.arange(len(calibration))
    folds = fold_of(index)
    fitting = index[folds == FIT]
    parts = {"S": index[folds == SELECTION], "A": fitting[0::2], "B": fitting[1::2]}
    assert not set(np.concatenate(list(parts.values()))) & set(index[folds == ESTIMATE])

    def observed(rows: np.ndarray):
        return collect(model, Dataset.from_arrays([calibration[rows]]), evaluate=False).statistics

    part_statistics = {fold: observed(rows) for fold, rows in parts.items()}
    engine = Engine(model, 0)

    def judging(inputs: np.ndarray) -> EvaluationSet:
        return EvaluationSet([inputs], engine.run([inputs]), "judging")

    fold_sets = {fold: judging(calibration[rows]) for fold, rows in parts.items()}
    fitted_without = {}
    for fold in FOLDS:
        others = [part_statistics[f] for f in FOLDS if f != fold]
        fitted_without[fold] = copy.deepcopy(others[0])
        fitted_without[fold].merge(copy.deepcopy(others[1]))
    final, judge = calibrated.statistics.subgraphs[0], judging(judged)
    scores = {}
    for recipe in (Recipe(m, bc) for m in METHODS for bc in (True, False)):
        row = {f: figures(planner.accuracy(fitted_without[f], recipe, fold_sets[f])) for f in FOLDS}
        row["judged"] = figures(planner.accuracy(final, recipe, judge))
        scores[label(recipe)] = row
    return {"name": name, "scores": scores}


def rule(
    methods: Sequence[str], folds: str, combine: Callable[[list[float]], float]
) -> Callable[[dict], str]:
    """A rule as the auto choice applies it: the methods with bias correction, then the best
    one without it, each scored by `combine` over `folds` of its worst fitting SQNR."""

    def score(scores: dict, candidate: str) -> float:
        return combine([min(scores[candidate][f]["fitting"], CAP_DB) for f in folds])

    def choose(scores: dict) -> str:
        best = max((m + "+bc" for m in methods), key=lambda c: score(scores, c))
        plain = best.removesuffix("+bc")
        return plain if score(scores, plain) > score(scores, best) else best

    return choose


def ort_best(result: dict, key: str, settings: Sequence[str] | None = None) -> float:
    return max(
        v[key]
        for k, v in result["methods"].items()
        if (settings is None or k in settings) and v.get(key) is not None
    )


CANDIDATE_SETS = {
    "minmax, p99.99, mse (before)": ("minmax", "percentile:99.99", "mse"),
    "+ p99.95": ("minmax", "percentile:99.99", "mse", "percentile:99.95"),
    "p99.99, mse, p99.95 (now)": ("percentile:99.99", "mse", "percentile:99.95"),
    "+ p99.95, p99.995": (
        "minmax",
        "percentile:99.99",
        "mse",
        "percentile:99.95",
        "percentile:99.995",
    ),
    "+ p99.95, p99.999": (
        "minmax",
        "percentile:99.99",
        "mse",
        "percentile:99.95",
        "percentile:99.999",
    ),
}
FOLD_RULES = {
    "S": ("S", min),
    "worse of two": ("SA", min),
    "mean of two": ("SA", statistics.mean),
    "worst of three": ("SAB", min),
    "mean of three": ("SAB", statistics.mean),
}


def compare(measured: list[dict], ort: dict[str, dict]) -> None:
    """Each rule's medians (and mean) of the per-model differences with ORT's best of four and
    of seven settings (SQNR / fitting SQNR), and the models ahead of the best of seven."""
    print("| candidates | folds | vs best of 4 | vs best of 7 | mean vs best of 7 | ahead of 7 |")
    print("|---|---|---|---|---|---|")
    for (sets, methods), (folds, (which, combine)) in product(
        CANDIDATE_SETS.items(), FOLD_RULES.items()
    ):
        choose = rule(methods, which, combine)
        against: dict[str, list[float]] = {"4p": [], "4f": [], "7p": [], "7f": []}
        for model in measured:
            judged = model["scores"][choose(model["scores"])]["judged"]
            result = ort[model["name"]]
            for tag, settings in (("4", FOUR), ("7", None)):
                against[tag + "p"].append(judged["plain"] - ort_best(result, "worst_db", settings))
                against[tag + "f"].append(
                    judged["fitting"] - ort_best(result, "worst_fitting_db", settings)
                )
        median = {k: statistics.median(v) for k, v in against.items()}
        mean = {k: statistics.mean(v) for k, v in against.items()}
        ahead = sum(d > 0 for d in against["7p"]), sum(d > 0 for d in against["7f"])
        print(
            f"| {sets} | {folds} | {median['4p']:+.2f} / {median['4f']:+.2f} "
            f"| {median['7p']:+.2f} / {median['7f']:+.2f} "
            f"| {mean['7p']:+.2f} / {mean['7f']:+.2f} | {ahead[0]} / {ahead[1]} |"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"any of {', '.join(MODELS)}")
    parser.add_argument("--ort-json", type=Path, required=True, help="bench.ort_peer's --json")
    parser.add_argument("--scores", type=Path, default=DEFAULT_SCORES, help="fold scores file")
    parser.add_argument("--scores-only", action="store_true", help="read the scores, measure none")
    args = parser.parse_args(argv)
    report = json.loads(args.ort_json.read_text())
    if report["judge"] != "development":
        parser.error("the rules are studied on the development crops only")
    ort = {row["name"]: row for row in report["models"]}
    names = args.models or list(ort)
    if args.scores_only:
        measured = [json.loads(line) for line in args.scores.read_text().splitlines()]
        measured = [m for m in measured if m["name"] in names]
    else:
        args.scores.parent.mkdir(parents=True, exist_ok=True)
        args.scores.write_text("")
        measured = []
        for name in names:
            measured.append(measure(name))
            with args.scores.open("a") as scores:
                scores.write(json.dumps(measured[-1]) + "\n")
    compare(measured, ort)


if __name__ == "__main__":
    main()
