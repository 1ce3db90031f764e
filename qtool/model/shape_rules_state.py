"""Shape rules of the operators that keep state: the LSTMs (whose states are variable tensors)
and the resource variables (VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE, and CALL_ONCE, which
runs their initialiser). Registered into `RULES` like the others."""

from __future__ import annotations

from qtool.model.shape_rules import (
    Inferred,
    OpView,
    ShapeError,
    elements,
    need_rank,
    rule,
    same_dim,
)

# The full LSTM kernels' operands (lstm_shared.h) whose shapes the output depends on.
_INPUT_TO_OUTPUT_WEIGHTS = 4
_RECURRENT_TO_OUTPUT_WEIGHTS = 8
_PROJECTION_WEIGHTS = 16
_OUTPUT_STATE, _CELL_STATE = 18, 19


def _lstm_sizes(view: OpView, features: int | None) -> tuple[int, int]:
    """(cells, outputs) from the weights, checked against the input's feature count."""
    cells, depth = need_rank(view, _INPUT_TO_OUTPUT_WEIGHTS, (2,), "input-to-output weights")
    if not same_dim(depth, features):
        raise ShapeError(f"input features {features} differ from the weights' depth {depth}")
    recurrent = need_rank(view, _RECURRENT_TO_OUTPUT_WEIGHTS, (1, 2), "recurrent weights")
    outputs = recurrent[-1]
    if view.present(_PROJECTION_WEIGHTS):
        outputs = need_rank(view, _PROJECTION_WEIGHTS, (2,), "projection weights")[0]
    if None in (cells, outputs):
        raise ShapeError("the LSTM's weights must have static shapes")
    return cells, outputs


def _states(view: OpView, batch: int | None, cells: int, outputs: int) -> None:
    for position, size, what in ((_OUTPUT_STATE, outputs, "output"), (_CELL_STATE, cells, "cell")):
        if not view.present(position):
            raise ShapeError(f"the {what} state (input {position}) is missing")
        count = elements(view.shape(position))
        if count is not None and batch is not None and count != batch * size:
            raise ShapeError(f"the {what} state holds {count} values, not batch {batch} x {size}")


@rule("unidirectional_sequence_lstm")
def _unidirectional_sequence_lstm(view: OpView) -> Inferred:
    x = need_rank(view, 0, (3,), "input")
    cells, outputs = _lstm_sizes(view, x[2])
    batch = x[1] if view.option("time_major") else x[0]
    _states(view, batch, cells, outputs)
    return [(x[0], x[1], outputs)]


@rule("lstm")
def _lstm(view: OpView) -> Inferred:
    x = need_rank(view, 0, (2,), "input")
    cells, outputs = _lstm_sizes(view, x[1])
    _states(view, x[0], cells, outputs)
    return [(x[0], outputs)]


@rule("var_handle")
def _var_handle(view: OpView) -> Inferred:
    return [()]


@rule("read_variable")
def _read_variable(view: OpView) -> Inferred:
    return view.unknown()  # the shape of whatever was assigned


@rule("no_outputs")
def _no_outputs(view: OpView) -> Inferred:
    return []
