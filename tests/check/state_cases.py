"""Injection cases of the rules of stateful operators (registered in CASES on import): int8
models qtool wrote from the built recurrent and streaming models of tests/recurrent_models."""

from __future__ import annotations

import functools
from unittest import mock

import numpy as np

import qtool
from qtool.model import Model, model_to_bytes, parse_model
from qtool.model.variables import accesses
from qtool.quantize import planner
from qtool.spec import integer_lstm
from tests.check.cases import Case, case
from tests.check.helpers import op_index
from tests.recurrent_models import LSTM_VARIANTS, lstm_model, sequences, stream_model


@functools.cache
def _quantized(kind: str) -> Model:
    if kind == "lstm":
        model, data = lstm_model(LSTM_VARIANTS[0]), sequences(16, 12, 8, seed=1)
        return parse_model(qtool.quantize_model(model_to_bytes(model), data).model_bytes)
    # The stream's state in int8, as a device without int16 kernels gets it (qtool's default
    # runs a recurrence through a variable in int16x8): int8 zero points can be moved alone.
    model, data = stream_model(), sequences(1, 120, 8, seed=3)[0]
    with mock.patch.object(planner, "recurrences", lambda model, subgraph_index, spec: {}):
        return parse_model(qtool.quantize_model(model_to_bytes(model), data).model_bytes)


@case
def variable_params() -> Case:
    base = _quantized("stream")
    subgraph = base.subgraphs[0]
    read = op_index(base, "READ_VARIABLE")
    assert read in next(iter(accesses(base, subgraph).values()))

    def edit(m: Model) -> None:  # the value read on another grid than the value assigned
        q = m.subgraphs[0].tensors[m.subgraphs[0].operators[read].outputs[0]].quantization
        q.zero_point = q.zero_point + 1

    # LiteRT's builtin kernels copy the bytes regardless; its default XNNPACK delegate, which
    # takes the variable ops too, refuses the model ("failed to delegate ASSIGN_VARIABLE").
    return Case(base, edit, [("QT-VARIABLE-PARAMS", "error", read, None)], litert="error")


@case
def lstm_contract() -> Case:
    base = _quantized("lstm")
    lstm = op_index(base, "UNIDIRECTIONAL_SEQUENCE_LSTM")
    cell = base.subgraphs[0].operators[lstm].inputs[integer_lstm().operands["cell_state"]]

    def edit(m: Model) -> None:
        # LiteRT's Prepare ignores the failed CheckedLog2 of the cell scale (it drops the status
        # of PopulateQuantizedLstmParams8x8_16): the model loads and runs with the exponent
        # rounded, its cell state read on the wrong grid.
        q = m.subgraphs[0].tensors[cell].quantization
        q.scale = q.scale * np.float32(1.5)

    return Case(base, edit, [("QT-LSTM-CONTRACT", "error", lstm, None)], litert="ok")
