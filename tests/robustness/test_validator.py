"""Models that load but are no valid graph: refused right after reading, on the operator at fault.

Each case is a reproducer of a crash site fuzzing found before the validator existed (a
KeyError, IndexError, ValueError, TypeError or MemoryError inside the engine, a kernel, the
planner or `inspect`), or of a model quantized "successfully" although LiteRT refuses it. The
invariant: `load_model` raises InvalidModelError naming the operator (or tensor) and what is
wrong; `qtool quantize` and `qtool inspect` end with that one line and exit 2; `qtool check`
reports it as a QT-MODEL-INVALID finding on that operator.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from qtool.model import Model, QuantParams, Tensor, TensorType, load_model, model_to_bytes
from qtool.model.validate import InvalidModelError
from tests.conftest import DATA, MODELS
from tests.fuzz.judge import run_cli


@dataclass(frozen=True)
class Case:
    fixture: str
    edit: Callable[[Model], None]
    where: str  # how the error names the place, e.g. "operator 6 (RESHAPE)"
    fragment: str  # part of what it says is wrong


def _op(model: Model, index: int):
    return model.subgraphs[0].operators[index]


def _tensor(model: Model, index: int):
    return model.subgraphs[0].tensors[index]


def _set(path: Callable[[Model], object], attribute: str, value: object) -> Callable[[Model], None]:
    return lambda m: setattr(path(m), attribute, value)


def _swap_type(index: int, op_type: str) -> Callable[[Model], None]:
    def edit(m: Model) -> None:
        _op(m, index).opcode_index = m.opcode_for(op_type)

    return edit


def _drop_input(index: int, position: int) -> Callable[[Model], None]:
    return lambda m: _op(m, index).inputs.pop(position)


def _change_value(tensor: int, value: int) -> Callable[[Model], None]:
    def edit(m: Model) -> None:
        values = m.tensor_data(_tensor(m, tensor)).copy()
        values.reshape(-1)[0] = value
        m.set_tensor_data(m.subgraphs[0], tensor, values)

    return edit


CASES: dict[str, Case] = {
    # kernels reached with operands that do not fit (conv.py, slicing.py, reduce.py...)
    "conv filter of another rank (conv IndexError)": Case(
        "cnn",
        lambda m: setattr(_tensor(m, 12), "shape", [16, 3, 9]),
        "operator 0 (CONV_2D)",
        "filter (input 1) must have rank 4, has shape [16, 3, 9]",
    ),
    "conv reads a float vector as filter (conv IndexError)": Case(
        "cnn", lambda m: _op(m, 0).inputs.__setitem__(1, 13), "operator 0 (CONV_2D)", "filter"
    ),
    "conv swapped in for a pool (conv AttributeError)": Case(
        "cnn", _swap_type(2, "CONV_2D"), "operator 2 (CONV_2D)", "has 1 inputs"
    ),
    "conv input of type BOOL (conv UFuncTypeError)": Case(
        "cnn",
        _set(lambda m: _tensor(m, 14), "dtype", TensorType.BOOL),
        "operator 0 (CONV_2D)",
        "is BOOL",
    ),
    "conv bias of the wrong length (conv _finish ValueError)": Case(
        "cnn",
        lambda m: m.set_tensor_data(m.subgraphs[0], 13, np.zeros(5, np.float32)),
        "operator 0 (CONV_2D)",
        "bias",
    ),
    "depthwise filter with fewer channels (depthwise AttributeError)": Case(
        "cnn",
        lambda m: _op(m, 1).inputs.__setitem__(1, 7),
        "operator 1 (DEPTHWISE_CONV_2D)",
        "filter",
    ),
    "depthwise without its bias slot (LiteRT segfaults, the calibration engine with it)": Case(
        "cnn", _drop_input(1, 2), "operator 1 (DEPTHWISE_CONV_2D)", "has 2 inputs, takes 3"
    ),
    "MEAN without its axis (reduce IndexError)": Case(
        "multi_io", _drop_input(2, 1), "operator 2 (MEAN)", "has 1 inputs, takes 2"
    ),
    "STRIDED_SLICE swapped in for a FULLY_CONNECTED (shape ValueError)": Case(
        "mlp",
        _swap_type(1, "STRIDED_SLICE"),
        "operator 1 (STRIDED_SLICE)",
        "has 3 inputs, takes 4",
    ),
    "PAD paddings of the wrong shape (pad ValueError)": Case(
        "mixed_ops",
        lambda m: _op(m, 3).inputs.__setitem__(1, 16),
        "operator 3 (PAD)",
        "paddings",
    ),
    "PRELU without alpha (prelu TypeError)": Case(
        "mixed_ops", _swap_type(5, "PRELU"), "operator 5 (PRELU)", "has 1 inputs, takes 2"
    ),
    "GATHER index out of range": Case(
        "spec_ops",
        _change_value(17, 99),
        "operator 14 (GATHER)",
        "out of [0,",
    ),
    "options table of another op (Operator.option KeyError)": Case(
        "cnn",
        lambda m: (setattr(_op(m, 0), "options_type", "AddOptions"), _op(m, 0).options.clear()),
        "operator 0 (CONV_2D)",
        "options table AddOptions",
    ),
    "padding 7": Case(
        "cnn",
        lambda m: _op(m, 0).options.__setitem__("padding", 7),
        "operator 0 (CONV_2D)",
        "option padding is 7",
    ),
    "FULLY_CONNECTED quantized_bias_type 99 (LiteRT: unsupported data type)": Case(
        "mlp",
        lambda m: _op(m, 0).options.__setitem__("quantized_bias_type", 99),
        "operator 0 (FULLY_CONNECTED)",
        "quantized_bias_type",
    ),
    "stride 0 (division by zero)": Case(
        "cnn",
        lambda m: _op(m, 0).options.__setitem__("stride_w", 0),
        "operator 0 (CONV_2D)",
        "must be >= 1",
    ),
    # the graph
    "an op reading what a later op writes (a cycle)": Case(
        "mlp",
        lambda m: _op(m, 0).inputs.__setitem__(0, 9),
        "operator 0 (FULLY_CONNECTED)",
        "which operator 2 only writes later",
    ),
    "an op reading what a later op writes (LiteRT reads garbage)": Case(
        "mlp",
        lambda m: m.subgraphs[0].operators.insert(0, m.subgraphs[0].operators.pop(1)),
        "operator 0 (FULLY_CONNECTED)",
        "which operator 1 only writes later",
    ),
    "a tensor written twice (planner KeyError)": Case(
        "mlp",
        lambda m: _op(m, 1).outputs.__setitem__(0, 7),
        "operator 1 (FULLY_CONNECTED)",
        "writes tensor 7",
    ),
    "an op reading a tensor nothing writes (engine KeyError)": Case(
        "cnn",
        lambda m: m.subgraphs[0].operators.pop(4),
        "operator 4 (CONV_2D)",
        "no operator's output",
    ),
    "an empty weight buffer": Case(
        "mlp",
        lambda m: setattr(m.buffers[_tensor(m, 5).buffer], "data", None),
        "operator 0 (FULLY_CONNECTED)",
        "",
    ),
    "subgraph output nothing produces": Case(
        "mlp",
        lambda m: m.subgraphs[0].outputs.append(
            m.subgraphs[0].add_tensor(Tensor("orphan", [1], 0))
        ),
        "",
        "output tensor 10 is produced by no operator",
    ),
    # tensors
    "a shape dim changed (LiteRT refuses input and output)": Case(
        "cnn",
        lambda m: _tensor(m, 15).shape.__setitem__(1, 11),
        "operator 1 (DEPTHWISE_CONV_2D)",
        "computes output 0 of shape [1, 24, 24, 16], the model declares [1, 11, 24, 16]",
    ),
    "a huge input shape (MemoryError)": Case(
        "mlp",
        lambda m: setattr(_tensor(m, 0), "shape", [1, 2**20, 2**20]),
        "tensor 0",
        "over qtool's limit",
    ),
    "an input of 2**62 elements whose int64 product wraps": Case(
        "mlp",
        lambda m: setattr(_tensor(m, 0), "shape", [2**31 - 1] * 3),
        "tensor 0",
        "over qtool's limit",
    ),
    "an unknown tensor type": Case(
        "mlp", _set(lambda m: _tensor(m, 7), "dtype", 42), "tensor 7", "unknown tensor type"
    ),
    "a rank of 40": Case(
        "mlp", lambda m: setattr(_tensor(m, 7), "shape", [1] * 40), "tensor 7", "rank 40"
    ),
    "a shape signature of another rank": Case(
        "mlp",
        lambda m: setattr(_tensor(m, 0), "shape_signature", [-1, 32, 1]),
        "tensor 0",
        "shape signature",
    ),
    "an unknown builtin code": Case(
        "mlp",
        lambda m: setattr(m.operator_codes[0], "builtin_code", 250),
        "operator 0 (BUILTIN_250)",
        "unknown builtin",
    ),
    "a constant as a model output (engine _join ValueError)": Case(
        "mixed_ops",
        lambda m: m.subgraphs[0].outputs.append(19),
        "tensor 19",
        "model output but a constant",
    ),
    "a constant as a model input (prelu broadcast ValueError)": Case(
        "mlp", lambda m: m.subgraphs[0].inputs.append(5), "tensor 5", "model input but a constant"
    ),
    "NaN weights (rewrite KeyError under --io int8)": Case(
        "mlp", _change_value(5, np.nan), "tensor 5", "is a constant holding NaN"
    ),
    "a signature entry without a name (model_inputs TypeError)": Case(
        "mlp",
        lambda m: m.signature_defs[0]["inputs"][0].__setitem__("name", None),
        "",
        "signature 'serving_default' lacks a key or an entry name",
    ),
    "a conv input without channels (ZeroDivisionError)": Case(
        "cnn",
        lambda m: _tensor(m, 0).shape.__setitem__(3, 0),
        "operator 0 (CONV_2D)",
        "for 0 input channels",
    ),
    "a strided slice declaring another shape (reshape kernel ValueError)": Case(
        "spec_ops",
        lambda m: _tensor(m, 47).shape.__setitem__(-1, 31),
        "operator 18 (STRIDED_SLICE)",
        "computes output 0 of shape",
    ),
    "a model input dimension of -1 (synthetic data ValueError)": Case(
        "mlp",
        lambda m: _tensor(m, 0).shape.__setitem__(0, -1),
        "tensor 0",
        "invalid shape [-1, 32]",
    ),
    "STRIDED_SLICE without strides (kernel TypeError)": Case(
        "spec_ops", _drop_input(18, 3), "operator 18 (STRIDED_SLICE)", "has 3 inputs, takes 4"
    ),
    "a signature naming other inputs": Case(
        "mlp",
        lambda m: m.signature_defs[0]["inputs"][0].__setitem__("tensor_index", 5),
        "",
        "signature 'serving_default' inputs",
    ),
}


def _write(case: Case, directory: Path) -> Path:
    model = load_model(MODELS / f"{case.fixture}.tflite")
    model.source_path = None
    case.edit(model)
    path = directory / "broken.tflite"
    path.write_bytes(model_to_bytes(model))
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_invalid_graph_is_refused_where_it_is_wrong(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    path = _write(case, tmp_path)
    with pytest.raises(InvalidModelError) as caught:
        load_model(path)
    assert str(caught.value).startswith(f"{path}: {case.where}"), str(caught.value)
    assert case.fragment in str(caught.value)

    out = tmp_path / "out"
    out.mkdir()
    for argv in (
        ["quantize", str(path), "--synthetic", "-o", str(out / "q.tflite")],
        ["inspect", str(path)],
    ):
        result = run_cli(argv, timeout=60)
        assert result.error is None and result.code == 2, (argv[0], result.stderr)
        lines = [
            line for line in result.stderr.splitlines() if not line.startswith("qtool: warning")
        ]
        assert lines == [f"qtool: error: {caught.value}"], result.stderr
    assert list(out.iterdir()) == []

    result = run_cli(["check", str(path), "--format", "json"], timeout=60)
    assert result.code == 1, result.stderr
    (model,) = json.loads(result.stdout)["models"]
    rules = {f["rule"] for f in model["findings"]}
    assert rules == {"QT-MODEL-INVALID"}
    first = caught.value.problems[0]
    assert any(
        f["op_index"] == first.op_index and f["message"] == first.message for f in model["findings"]
    )


def test_names_that_are_not_utf8_are_shown_escaped(tmp_path: Path) -> None:
    model = load_model(MODELS / "mlp.tflite")
    _tensor(model, 0).name = b"\xff\xfeimage"
    model.signature_defs[0]["signature_key"] = b"key\x80"
    path = tmp_path / "names.tflite"
    path.write_bytes(model_to_bytes(model))
    again = load_model(path)
    assert _tensor(again, 0).name == "\\xff\\xfeimage"
    assert again.signature_defs[0]["signature_key"] == "key\\x80"

    text = run_cli(["inspect", str(path)], 60)
    assert text.code == 0 and "\\xff\\xfeimage" in text.stdout
    described = json.loads(run_cli(["inspect", str(path), "--json"], 60).stdout)
    assert described["subgraphs"][0]["tensors"][0]["name"] == "\\xff\\xfeimage"
    assert run_cli(["check", str(path)], 60).error is None
    shutil.copy(DATA / "mlp_calib.npz", tmp_path / "data.npz")
    data = np.load(tmp_path / "data.npz")
    np.save(tmp_path / "data.npy", data[data.files[0]])
    result = run_cli(
        [
            "quantize",
            str(path),
            "--data",
            str(tmp_path / "data.npy"),
            "-o",
            str(tmp_path / "q.tflite"),
        ],
        60,
    )
    assert result.code == 0, result.stderr
    report = json.loads((tmp_path / "q.report.json").read_text())
    assert "\\xff\\xfeimage" in {row["name"] for row in report["io"]}
    assert load_model(tmp_path / "q.tflite").signature_defs[0]["signature_key"] == "key\\x80"


def test_quantization_parameters_are_judged_by_check_not_refused(tmp_path: Path) -> None:
    """Broken scales are an audit finding (QT-QPARAM-COUNT), not an invalid graph."""
    model = load_model(MODELS / "tf_int8" / "cnn_int8.tflite")
    weights = _tensor(model, _op(model, 1).inputs[1])
    weights.quantization = QuantParams(
        scale=weights.quantization.scale, zero_point=weights.quantization.zero_point[:-1]
    )
    path = tmp_path / "q.tflite"
    path.write_bytes(model_to_bytes(model))
    load_model(path)
    result = run_cli(["check", str(path), "--format", "json"], 60)
    rules = {f["rule"] for f in json.loads(result.stdout)["models"][0]["findings"]}
    assert "QT-QPARAM-COUNT" in rules and "QT-MODEL-INVALID" not in rules
