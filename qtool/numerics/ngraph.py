"""nGraph's ``Quantize``: ``output = round(input / scale) + zero_point`` over a set of axes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from qtool.errors import UsageError
from qtool.numerics._common import (
    along_axes,
    float_data,
    integer_param,
    normalize_axes,
    positive_scale,
    saturating_round,
)
from qtool.numerics.dtypes import IntType, int_type
from qtool.numerics.rounding import RoundMode


def _projected(param: ArrayLike, name: str, shape: tuple[int, ...]) -> np.ndarray:
    p = np.asarray(param)
    if p.size == 1:
        return np.broadcast_to(p.reshape(()), shape).ravel()
    if p.shape != shape:
        raise UsageError(
            f"{name} must have shape {shape} (the input projected onto axes), got {p.shape}"
        )
    return p.ravel()


def ngraph_quantize(
    x: ArrayLike,
    scale: ArrayLike,
    zero_point: ArrayLike,
    axes: Sequence[int],
    out_dtype: DTypeLike | IntType,
    round_mode: RoundMode | str,
) -> np.ndarray:
    """Quantize with one scale/zero point per position over ``axes`` (zero, one or several).

    ``axes`` is a set: ``scale`` and ``zero_point`` have the shape of ``x`` restricted to those
    dimensions, in the input's dimension order (a single value is also accepted and broadcast).
    The division happens in the input's floating type, since nGraph's scale shares the input's
    element type; the result saturates to ``out_dtype``.
    """
    t = int_type(out_dtype)
    mode = RoundMode.parse(round_mode)
    a = float_data(x)
    ax = tuple(sorted(normalize_axes(axes, a.ndim)))
    shape = tuple(a.shape[i] for i in ax)
    s = positive_scale(_projected(scale, "scale", shape), a.dtype).reshape(shape)
    zp = integer_param(_projected(zero_point, "zero_point", shape), "zero_point", t.qmin, t.qmax)
    with np.errstate(over="ignore"):
        real = a / along_axes(s, a.ndim, ax)
    zp = along_axes(zp.reshape(shape), a.ndim, ax)
    return saturating_round(real, zp, t.qmin, t.qmax, mode).astype(t.storage)
