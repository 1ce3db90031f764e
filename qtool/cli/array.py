"""``qtool array``: quantize and dequantize .npy arrays with the numerics library."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np

from qtool.calibrate.npyfile import ArrayFileError, load_npy
from qtool.cli.render import print_json, print_table, stdout
from qtool.display import printable
from qtool.errors import DataError, UsageError
from qtool.files import NotRegularFile, open_regular, os_reason
from qtool.model import write_atomic
from qtool.model.io import refuse_input_overwrite
from qtool.numerics import (
    RoundMode,
    activation_params,
    dequantize,
    ngraph_quantize,
    quantize,
    tf_quantize,
)

QUANTIZE_MODES = ("tflite", "min-combined", "min-first", "scaled", "affine")
QUANTIZED_DTYPES = ("int8", "uint8", "int16", "uint16", "int32")
FLOAT_DTYPES = ("float32", "float16")


class _Choice(click.ParamType):
    """Like click.Choice, but a bad value is a one-line qtool error rather than a usage dump."""

    name = "choice"

    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(self.choices) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if value in self.choices:
            return value
        raise UsageError(
            f"invalid {_option(param)} {value!r} (choose from {', '.join(self.choices)})"
        )


class _NumberList(click.ParamType):
    """A number, or a comma-separated list of numbers (one per slice along --axis)."""

    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind
        self.name = "int[,int...]" if kind is int else "number[,number...]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> list:
        if isinstance(value, list):
            return value
        try:
            return [self.kind(part) for part in str(value).split(",")]
        except ValueError:
            what = "an integer" if self.kind is int else "a number"
            raise UsageError(
                f"{_option(param)} expects {what} or a comma-separated list, got {value!r}"
            ) from None


class _RoundModeType(click.ParamType):
    name = "mode"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "MODE"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> RoundMode:
        return RoundMode.parse(value)


def _option(param: click.Parameter | None) -> str:
    return param.opts[0] if param is not None and param.opts else "value"


def _load(path: Path) -> np.ndarray:
    try:
        with open_regular(path) as handle:
            magic = handle.read(6)
            handle.seek(0)
            if magic[:4] == b"PK\x03\x04":
                raise DataError(f"{path}: is an .npz archive; give a single .npy array")
            # Read into memory: the result outlives the file, and a map would pin it.
            return np.array(load_npy(handle, os.fstat(handle.fileno()).st_size))
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except NotRegularFile as exc:
        raise DataError(f"{path}: not a file (it is {exc.kind})") from None
    except ArrayFileError as exc:
        raise DataError(f"{path}: unreadable .npy file ({exc})") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot read ({os_reason(exc)})") from None


def _output_path(input_path: Path, output: Path | None) -> Path:
    if output is None:
        raise UsageError("missing -o/--output: where to write the result")
    refuse_input_overwrite(output, [input_path])
    return output


def _save_atomic(path: Path, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, array)
    write_atomic(path, [buffer.getbuffer()])


def _forbid(mode: str, **given: Any) -> None:
    for name, value in given.items():
        if value is not None and value is not False:
            raise UsageError(f"--{name.replace('_', '-')} cannot be used with --mode {mode}")


def _floats(values: Any) -> list[float]:
    # str() of a float32 is its shortest round-trip form: 0.035294116, not 0.03529411554336548.
    return [float(str(v)) for v in np.asarray(values, dtype=np.float32).ravel()]


def _ints(values: Any) -> list[int]:
    return [int(v) for v in np.asarray(values).ravel()]


def _report(title: str, info: dict[str, Any], as_json: bool, quiet: bool) -> None:
    if as_json:
        print_json(info)
        return
    if quiet:
        stdout.out(f"wrote {printable(info['output'])}", highlight=False)
        return
    rows = [
        (
            key.replace("_", " "),
            ", ".join(str(v) for v in value) if isinstance(value, list) else str(value),
        )
        for key, value in info.items()
    ]
    print_table(stdout, title, ("parameter", "value"), rows)


def _quantize_tflite(
    data: np.ndarray, dtype: str, opts: dict[str, Any]
) -> tuple[np.ndarray, dict[str, Any]]:
    _forbid(
        "tflite",
        scale=opts["scale"],
        zero_point=opts["zero_point"],
        axis=opts["axis"],
        ensure_minimum_range=opts["ensure_minimum_range"],
    )
    bounds = {}
    for name in ("min", "max"):
        given = opts[name]
        if given is not None and len(given) != 1:
            raise UsageError(
                f"--{name} takes one number in tflite mode (activations are per-tensor)"
            )
        if given is None and (data.size == 0 or np.isnan(data).any()):
            raise DataError(f"the data has no range (empty, or contains NaN): give --{name}")
        bounds[name] = given[0] if given is not None else float(getattr(np, name)(data))
    params = activation_params(bounds["min"], bounds["max"], dtype)
    round_mode = opts["round_mode"] or RoundMode.HALF_AWAY_FROM_ZERO
    result = quantize(
        data, params, dtype=dtype, round_mode=round_mode, narrow_range=opts["narrow_range"]
    )
    return result, {
        "min": _floats(bounds["min"]),
        "max": _floats(bounds["max"]),
        "scale": _floats(params.scale),
        "zero_point": _ints(params.zero_point),
        "round_mode": round_mode.cli_name,
        "narrow_range": opts["narrow_range"],
    }


def _quantize_tf(
    data: np.ndarray, mode: str, dtype: str, opts: dict[str, Any]
) -> tuple[np.ndarray, dict[str, Any]]:
    _forbid(mode, scale=opts["scale"], zero_point=opts["zero_point"])
    if mode != "scaled":
        _forbid(mode, narrow_range=opts["narrow_range"])
    if opts["min"] is None or opts["max"] is None:
        raise UsageError(f"--mode {mode} needs --min and --max")
    round_mode = opts["round_mode"] or RoundMode.HALF_AWAY_FROM_ZERO
    emr = 0.01 if opts["ensure_minimum_range"] is None else opts["ensure_minimum_range"]
    tf_type = "q" + dtype  # int8 -> qint8, uint8 -> quint8
    result = tf_quantize(
        data,
        opts["min"],
        opts["max"],
        tf_type,
        mode.upper().replace("-", "_"),
        round_mode=round_mode,
        narrow_range=opts["narrow_range"],
        axis=opts["axis"],
        ensure_minimum_range=emr,
    )
    return result.output, {
        "tf_type": tf_type,
        "min_range": _floats(opts["min"]),
        "max_range": _floats(opts["max"]),
        "output_min": _floats(result.output_min),
        "output_max": _floats(result.output_max),
        "ensure_minimum_range": float(str(np.float32(emr))),
        "round_mode": round_mode.cli_name,
        "narrow_range": opts["narrow_range"],
    }


def _quantize_affine(
    data: np.ndarray, dtype: str, opts: dict[str, Any]
) -> tuple[np.ndarray, dict[str, Any]]:
    _forbid(
        "affine",
        min=opts["min"],
        max=opts["max"],
        narrow_range=opts["narrow_range"],
        ensure_minimum_range=opts["ensure_minimum_range"],
    )
    if opts["scale"] is None:
        raise UsageError("--mode affine needs --scale")
    zero_point = opts["zero_point"] or [0]
    axes = () if opts["axis"] is None else (opts["axis"],)
    per_axis = (len(opts["scale"]), len(zero_point)) != (1, 1)
    if per_axis and not axes:
        raise UsageError("several --scale/--zero-point values need --axis")
    round_mode = opts["round_mode"] or RoundMode.HALF_AWAY_FROM_ZERO
    result = ngraph_quantize(data, opts["scale"], zero_point, axes, dtype, round_mode)
    return result, {
        "scale": _floats(opts["scale"]),
        "zero_point": zero_point,
        "round_mode": round_mode.cli_name,
    }


def _output_option(kind: str) -> Callable[[Callable], Callable]:
    """-o/--output of an array command writing a `kind` array."""
    return click.option(
        "-o",
        "--output",
        type=click.Path(path_type=Path),
        help=f"Where to write the {kind} .npy (required; never the input file).",
    )


_REPORT_OPTIONS = (
    click.option("--json", "as_json", is_flag=True, help="Print the parameters as JSON."),
    click.option("-q", "--quiet", is_flag=True, help="Print only the file written."),
)


def _report_options(command: Callable) -> Callable:
    """--json and -q/--quiet, in that order: how an array command reports what it wrote."""
    for option in reversed(_REPORT_OPTIONS):
        command = option(command)
    return command


@click.group("array")
def array_group() -> None:
    """Quantize and dequantize .npy arrays with the TFLite, TensorFlow and nGraph definitions."""


@array_group.command("quantize")
@click.argument("input_path", metavar="IN.npy", type=click.Path(path_type=Path))
@_output_option("quantized")
@click.option(
    "--mode",
    type=_Choice(QUANTIZE_MODES),
    default="tflite",
    show_default=True,
    help="tflite: TFLite activation params from --min/--max (default: the data's range); "
    "min-combined/min-first/scaled: TensorFlow's Quantize op; "
    "affine: round(x / scale) + zero_point with --scale/--zero-point.",
)
@click.option(
    "--dtype",
    type=_Choice(QUANTIZED_DTYPES),
    default="int8",
    show_default=True,
    help="Quantized type (the TensorFlow modes use the matching qint/quint type).",
)
@click.option(
    "--min", "min_values", type=_NumberList(float), help="Range minimum (per axis: a list)."
)
@click.option(
    "--max", "max_values", type=_NumberList(float), help="Range maximum (per axis: a list)."
)
@click.option(
    "--scale", type=_NumberList(float), help="Scale for --mode affine (per axis: a list)."
)
@click.option(
    "--zero-point", type=_NumberList(int), help="Zero point for --mode affine (default 0)."
)
@click.option(
    "--axis", type=int, help="Quantize per slice along this axis (negative counts from the end)."
)
@click.option("--narrow-range", is_flag=True, help="Do not use the lowest value (int8: -127..127).")
@click.option(
    "--round-mode",
    type=_RoundModeType(),
    help="Rounding: "
    + ", ".join(mode.cli_name for mode in RoundMode)
    + " (default half-away-from-zero; the TensorFlow modes allow half-away-from-zero and "
    "half-to-even, the latter only with scaled).",
)
@click.option(
    "--ensure-minimum-range",
    type=float,
    help="TensorFlow modes: minimum width of the range (default 0.01, as TensorFlow).",
)
@_report_options
def quantize_command(
    input_path: Path,
    output: Path | None,
    mode: str,
    dtype: str,
    min_values: list[float] | None,
    max_values: list[float] | None,
    scale: list[float] | None,
    zero_point: list[int] | None,
    axis: int | None,
    narrow_range: bool,
    round_mode: RoundMode | None,
    ensure_minimum_range: float | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Quantize the float array IN.npy and write the integers to -o OUT.npy."""
    out = _output_path(input_path, output)
    data = _load(input_path)
    if data.dtype.kind not in "biuf":
        raise DataError(f"{input_path}: expected real numbers, got an array of {data.dtype}")
    opts = {
        "min": min_values,
        "max": max_values,
        "scale": scale,
        "zero_point": zero_point,
        "axis": axis,
        "narrow_range": narrow_range,
        "round_mode": round_mode,
        "ensure_minimum_range": ensure_minimum_range,
    }
    if mode == "tflite":
        result, params = _quantize_tflite(data, dtype, opts)
    elif mode == "affine":
        result, params = _quantize_affine(data, dtype, opts)
    else:
        result, params = _quantize_tf(data, mode, dtype, opts)
    _save_atomic(out, result)
    info = {
        "mode": mode,
        "dtype": dtype,
        "axis": axis,
        **params,
        "shape": list(result.shape),
        "output": str(out),
    }
    _report("qtool array quantize", info, as_json, quiet)


@array_group.command("dequantize")
@click.argument("input_path", metavar="IN.npy", type=click.Path(path_type=Path))
@_output_option("float")
@click.option("--scale", type=_NumberList(float), help="Scale (per axis: a list).")
@click.option(
    "--zero-point", type=_NumberList(int), help="Zero point (default 0; per axis: a list)."
)
@click.option("--axis", type=int, help="Dequantize per slice along this axis.")
@click.option(
    "--out-dtype",
    type=_Choice(FLOAT_DTYPES),
    default="float32",
    show_default=True,
    help="Float type of the result.",
)
@_report_options
def dequantize_command(
    input_path: Path,
    output: Path | None,
    scale: list[float] | None,
    zero_point: list[int] | None,
    axis: int | None,
    out_dtype: str,
    as_json: bool,
    quiet: bool,
) -> None:
    """Dequantize the integer array IN.npy: (q - zero_point) * scale, written to -o OUT.npy."""
    out = _output_path(input_path, output)
    if scale is None:
        raise UsageError("missing --scale")
    data = _load(input_path)
    zp = zero_point or [0]
    result = dequantize(data, scale, zp, axis, out_dtype=out_dtype)
    _save_atomic(out, result)
    info = {
        "scale": _floats(scale),
        "zero_point": zp,
        "axis": axis,
        "dtype": out_dtype,
        "shape": list(result.shape),
        "output": str(out),
    }
    _report("qtool array dequantize", info, as_json, quiet)
