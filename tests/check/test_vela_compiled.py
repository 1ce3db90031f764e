"""A model Vela compiled is a model `check` audits: its NPU part, an `ethos-u` custom op with
command-stream, read-only and scratch tensors (schemas/ops.json custom_ops), is valid and placed
on the NPU; the ops Vela left for the CPU are audited and placed as in the source model.

Each compiled model is Vela's own output for a fixture (tests/check/oracles.py: seconds).
"""

from __future__ import annotations

import numpy as np
import pytest

from qtool.check import audit_model
from qtool.model import Model, TensorType, model_to_bytes, parse_model
from qtool.model.validate import model_problems
from qtool.targets.placement import ON_TARGET, place_model
from tests.check.helpers import mutate, new_findings, op_index, op_tensor
from tests.check.oracles import vela_compiled
from tests.check.test_target_oracles import model_bytes

# Models with CPU ops around several NPU parts, a weightless NPU part (empty read-only data),
# and a shape computation Vela removes.
SOURCES = [
    "tf:spec_ops_int8",
    "tf:unit_norm_int8",
    "built:maxpool_stride4_same",
    "built:flatten_by_shape",
]


def _compiled(key: str) -> tuple[Model, Model]:
    data = model_bytes(key)
    return parse_model(data), parse_model(vela_compiled(data))


def _by_output(model: Model) -> dict[str, tuple[int, int]]:
    """(subgraph, op index) of every op by the name of its first output (Vela keeps names)."""
    return {
        subgraph.tensors[op.outputs[0]].name: (s, i)
        for s, i, subgraph, op in model.iter_ops()
        if op.outputs
    }


def _cpu_ops(compiled: Model) -> dict[str, tuple[int, int]]:
    return {
        name: where
        for name, where in _by_output(compiled).items()
        if compiled.op_type(compiled.subgraphs[where[0]].operators[where[1]]) != "ethos-u"
    }


@pytest.mark.parametrize("key", SOURCES)
def test_the_cpu_ops_are_audited_as_in_the_source(key: str) -> None:
    source, compiled = _compiled(key)
    assert model_problems(compiled) == []
    assert any(compiled.op_type(op) == "ethos-u" for *_, op in compiled.iter_ops())
    cpu = _cpu_ops(compiled)
    by_name = _by_output(source)

    def keyed(model: Model, findings, places: dict[str, tuple[int, int]]) -> list[tuple]:
        names = {where: name for name, where in places.items()}
        return sorted(
            (f.rule, f.severity, f.op, names[(f.subgraph, f.op_index)], f.role or "")
            for f in findings
            if (f.subgraph, f.op_index) in names
        )

    source_cpu = {name: by_name[name] for name in cpu if name in by_name}
    assert keyed(compiled, audit_model(compiled), cpu) == keyed(
        source, audit_model(source), source_cpu
    )


@pytest.mark.parametrize("key", SOURCES)
def test_the_npu_part_is_on_the_npu_and_the_rest_where_it_was(key: str) -> None:
    source, compiled = _compiled(key)
    report = place_model(compiled, "ethos-u")
    before = {(p.subgraph, p.index): p.status for p in place_model(source, "ethos-u").ops}
    by_name = _by_output(source)
    cpu = _cpu_ops(compiled)
    for placed in report.ops:
        if placed.op == "ethos-u":
            assert placed.status == ON_TARGET
        else:
            name = next(n for n, where in cpu.items() if where == (placed.subgraph, placed.index))
            assert placed.status == before[by_name[name]], name
    ethos = sum(placed.op == "ethos-u" for placed in report.ops)
    assert report.compiled == ethos and report.mac_share is None
    assert f"{ethos} op{'s' * (ethos != 1)} already compiled" in report.summary_line()
    # TFLite Micro hands the op to the NPU's driver (its resolver registers ethos-u).
    on_tflm = place_model(compiled, "tflm")
    assert on_tflm.compiled == ethos and on_tflm.mac_share is None
    assert all(p.status == ON_TARGET for p in on_tflm.ops if p.op == "ethos-u")


def test_a_defect_of_a_cpu_op_is_found_beside_the_npu_part() -> None:
    _, base = _compiled("tf:spec_ops_int8")
    log_softmax = op_index(base, "LOG_SOFTMAX")
    out = op_tensor(base, log_softmax, "output", 0)

    def edit(m: Model) -> None:  # LOG_SOFTMAX's int8 output has fixed parameters
        m.subgraphs[0].tensors[out].quantization.scale = np.array([0.1], np.float32)

    mutated, _ = mutate(base, edit)
    found = new_findings(base, mutated)
    assert [(f.rule, f.op_index) for f in found] == [("QT-FIXED-OUTPUT", log_softmax)]


def test_an_ill_formed_ethos_u_op_is_still_invalid() -> None:
    _, compiled = _compiled("built:maxpool_stride4_same")
    npu = op_index(compiled, "ethos-u")
    feature_map = compiled.subgraphs[0].operators[npu].inputs[4]
    compiled.subgraphs[0].tensors[feature_map].dtype = TensorType.FLOAT32
    (problem,) = model_problems(parse_model(model_to_bytes(compiled), validate=False))
    assert "input 4 (feature_map) is FLOAT32" in problem.message
    _, compiled = _compiled("built:maxpool_stride4_same")
    del compiled.subgraphs[0].operators[npu].inputs[2:4]  # no scratch areas
    (problem,) = model_problems(parse_model(model_to_bytes(compiled), validate=False))
    assert "has 3 inputs, takes at least 5" in problem.message
