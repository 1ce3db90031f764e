"""The planning options of `qtool quantize` and `qtool analyze`, and analyze's own, given odd or
wrong values: --calibration methods, --target-sqnr numbers, --int16 patterns, --holdout places,
--samples counts, analyze's --top and -o.

Each case starts, as an output case does, from a copy of the `mlp` fixture in `<case>/in/` and
gives a command line, the exit codes it may end with and the files a success writes (judged as in
`output_cases.py`): a wrong value is one `qtool: error:` line and exit 2, an odd but meaningful
one a normal run, a target that cannot be reached exit 1 with nothing written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.fuzz.data_cases import ACCEPTED, ANY, REFUSED
from tests.fuzz.output_cases import DATA, OutputCase, Plan

ROOT = Path(__file__).resolve().parents[2]
HOLDOUT = ROOT / "fixtures" / "data" / "mlp_holdout.npz"
UNREACHED = frozenset({1})
QUANTIZED = {"m.tflite", "m.report.json"}

CASES: list[OutputCase] = []


def _quantize_case(name: str, expect: frozenset[int], *options: str, data: bool = True) -> None:
    def build(d: Path, model: Path) -> Plan:
        argv = ["quantize", str(model), *(["--data", str(DATA)] if data else []), "--quiet"]
        argv += [
            "--samples",
            "16",
            *(o.replace("{d}", str(d)) for o in options),
            "-o",
            str(d / "m.tflite"),
        ]
        return Plan(argv, expect, QUANTIZED)

    CASES.append(OutputCase(f"quantize {name}", build))


def _analyze_case(name: str, expect: frozenset[int], *options: str, data: bool = True) -> None:
    def build(d: Path, model: Path) -> Plan:
        argv = ["analyze", str(model), *(["--data", str(DATA)] if data else []), "--quiet"]
        argv += ["--samples", "16", *(o.replace("{d}", str(d)) for o in options)]
        written = {"a.json"} if "{d}/a.json" in options else set()
        return Plan(argv, expect, written)

    CASES.append(OutputCase(f"analyze {name}", build))


# --------------------------------------------------------------------------- --calibration

for method, expect in (
    ("bogus", REFUSED),
    ("", REFUSED),
    ("AUTO", REFUSED),
    (" kl", REFUSED),
    ("minmax:1", REFUSED),
    ("percentile:", ACCEPTED),
    ("percentile:abc", REFUSED),
    ("percentile:50", REFUSED),
    # A median range, nearly 0 after a ReLU: the output scale ends so small that XNNPACK cannot
    # requantize into it (ratio of scales over 256) and the read-back check refuses the model.
    ("percentile:50.000001", ACCEPTED | UNREACHED),
    ("percentile:100", ACCEPTED),
    ("percentile:100.0000001", REFUSED),
    ("percentile:-0", REFUSED),
    ("percentile:nan", REFUSED),
    ("percentile:inf", REFUSED),
    ("percentile:1e400", REFUSED),
    ("percentile:99:9", REFUSED),
    ("percentile:0x63", REFUSED),
    ("minmax", ACCEPTED),
    ("mse", ACCEPTED),
    ("kl", ACCEPTED),
    ("auto", ACCEPTED),
):
    _quantize_case(f"--calibration {method!r}", expect, "--calibration", method)
    _analyze_case(f"--calibration {method!r}", expect, "--calibration", method)

# --------------------------------------------------------------------------- --target-sqnr

for value, expect in (
    ("nan", REFUSED),
    ("inf", REFUSED),
    ("-inf", REFUSED),
    ("1e400", REFUSED),
    ("abc", REFUSED),
    ("", REFUSED),
    ("-1e308", ACCEPTED),
    ("-5", ACCEPTED),
    ("0", ACCEPTED),
    ("10", ACCEPTED),
    ("500", UNREACHED),
):
    _quantize_case(f"--target-sqnr {value!r}", expect, "--target-sqnr", value)
_quantize_case(
    "--target-sqnr 500 --allow-float", UNREACHED | ACCEPTED, "--target-sqnr", "500", "--allow-float"
)
_quantize_case("--allow-float alone", ACCEPTED, "--allow-float")
_quantize_case(
    "--target-sqnr 1e308 --allow-float",
    UNREACHED | ACCEPTED,
    "--target-sqnr",
    "1e308",
    "--allow-float",
)

# --------------------------------------------------------------------------- --int16, --activations

for pattern, expect in (
    ("*", ACCEPTED),
    ("", ANY),
    ("[", ANY),
    ("[!]", ANY),
    ("FULLY_CONNECTED", ACCEPTED),
    ("fully_connected", ANY),
    ("NO_SUCH_OP", ANY),
    ("*MatMul*", ACCEPTED),
    ("\udcff", ANY),
    ("x" * 5000, ANY),
):
    _quantize_case(f"--int16 {pattern[:20]!r}", expect, "--int16", pattern)
    _analyze_case(f"--int16 {pattern[:20]!r}", expect, "--int16", pattern)

for name, options in (
    ("--int16 * --keep-float *", ("--int16", "*", "--keep-float", "*")),
    ("--int16 * --io int8", ("--int16", "*", "--io", "int8")),
    ("--int16 * --io uint8", ("--int16", "*", "--io", "uint8")),
    ("--activations int16 --io uint8", ("--activations", "int16", "--io", "uint8")),
    ("--int16 * --per-tensor-fc", ("--int16", "*", "--per-tensor-fc")),
    ("--int16 * --strict", ("--int16", "*", "--strict")),
    ("--activations int16 --engine litert", ("--activations", "int16", "--engine", "litert")),
    ("--activations int16 --target-sqnr 30", ("--activations", "int16", "--target-sqnr", "30")),
    ("--activations int16 --optimize-rounding", ("--activations", "int16", "--optimize-rounding")),
):
    _quantize_case(name, ANY | UNREACHED, *options)
for target in ("edgetpu", "ethos-u", "tflm", "xnnpack"):
    _quantize_case(
        f"--int16 * --target {target}", ANY | UNREACHED, "--int16", "*", "--target", target
    )
    _quantize_case(
        f"--activations int16 --target {target}",
        ANY | UNREACHED,
        "--activations",
        "int16",
        "--target",
        target,
    )

# --------------------------------------------------------------------------- --holdout

for name, expect, options in (
    ("--holdout the calibration data", ACCEPTED, ("--holdout", str(DATA))),
    ("--holdout twice", ACCEPTED, ("--holdout", str(HOLDOUT), "--holdout", str(HOLDOUT))),
    ("--holdout KEY=", ACCEPTED, ("--holdout", f"serving_default={HOLDOUT}")),
    ("--holdout unknown KEY=", REFUSED, ("--holdout", f"nokey={HOLDOUT}")),
    ("--holdout the model", REFUSED, ("--holdout", "{d}/in/model.tflite")),
    ("--holdout the output", REFUSED, ("--holdout", "{d}/m.tflite")),
    ("--holdout a directory of nothing", REFUSED, ("--holdout", "{d}/in")),
    ("--holdout missing", REFUSED, ("--holdout", "{d}/missing.npz")),
    ("--holdout empty string", REFUSED, ("--holdout", "")),
    ("--holdout /dev/zero", REFUSED, ("--holdout", "/dev/zero")),
    (
        "--holdout with --calibration kl",
        ACCEPTED,
        ("--holdout", str(HOLDOUT), "--calibration", "kl"),
    ),
):
    _quantize_case(name, expect, *options)
    _analyze_case(name, expect, *options)
_quantize_case(
    "--holdout with --target-sqnr 20",
    ACCEPTED | UNREACHED,
    "--holdout",
    str(HOLDOUT),
    "--target-sqnr",
    "20",
)


_quantize_case("--synthetic --holdout", ANY, "--synthetic", "--holdout", str(HOLDOUT), data=False)

# --------------------------------------------------------------------------- counts and flags

for value, expect in (
    ("0", REFUSED),
    ("-1", REFUSED),
    ("1", ANY),
    ("2", ANY),
    ("1000000000", ACCEPTED),
):
    _quantize_case(f"--samples {value}", expect, "--samples", value)
    _analyze_case(f"--samples {value}", expect, "--samples", value)
for name, options in (
    ("--optimize-rounding --samples 2", ("--optimize-rounding", "--samples", "2")),
    ("--bias-correction --calibration minmax", ("--bias-correction", "--calibration", "minmax")),
    ("--no-bias-correction --optimize-rounding", ("--no-bias-correction", "--optimize-rounding")),
    ("--analyze --layer-errors", ("--analyze", "--layer-errors")),
    ("--analyze --samples 3", ("--analyze", "--samples", "3")),
    ("--analyze --int16 *", ("--analyze", "--int16", "*")),
):
    _quantize_case(name, ANY, *options)
for value in ("-1", "2**64", "18446744073709551616", "x"):
    _quantize_case(f"--synthetic --seed {value}", ANY, "--synthetic", "--seed", value, data=False)

# --------------------------------------------------------------------------- analyze's own

_analyze_case("without --data", REFUSED, data=False)
for value, expect in (("-1", ANY), ("0", ACCEPTED), ("1000000000", ACCEPTED), ("x", REFUSED)):
    _analyze_case(f"--top {value}", expect, "--top", value)
_analyze_case("--json", ACCEPTED, "--json")
_analyze_case("-o", ACCEPTED, "-o", "{d}/a.json")
_analyze_case("-o in a missing directory", REFUSED, "-o", "{d}/none/a.json")
_analyze_case("-o the model", REFUSED, "-o", "{d}/in/model.tflite")
_analyze_case("-o the data", REFUSED, "-o", str(DATA))
_analyze_case("-o a directory", REFUSED, "-o", "{d}/in")
_analyze_case("-o a name too long", REFUSED, "-o", "{d}/" + "a" * 300 + ".json")
_analyze_case("-o in /proc", REFUSED, "-o", "/proc/self/a.json")
_analyze_case("--custom-ops missing", REFUSED, "--custom-ops", "qtool_no_such_module_xyz")
_analyze_case("--engine litert", ACCEPTED, "--engine", "litert")
_analyze_case(
    "--engine numpy --activations int16", ACCEPTED, "--engine", "numpy", "--activations", "int16"
)


def _analyze_quantized(d: Path, model: Path) -> Plan:
    quantized = d / "in" / "q.tflite"
    shutil.copy(ROOT / "fixtures" / "models" / "tf_int8" / "mlp_int8.tflite", quantized)
    return Plan(["analyze", str(quantized), "--data", str(DATA), "--quiet"], ANY)


CASES.append(OutputCase("analyze an int8 model", _analyze_quantized))
