"""Custom options stored as a raw C struct of int32 fields (MediaPipe's custom ops).

MediaPipe's Convolution2DTransposeBias, MaxPoolingWithArgmax2D and MaxUnpooling2D keep their
options as TfLiteTransposeConvParams or TfLitePoolParams written raw, in native (little-endian)
order. `schemas/ops.json` names the fields of each (`custom_options`) as the builtin options they
mean; TfLitePadding counts from 1 (SAME) where the schema's Padding counts from 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qtool.errors import ModelError
from qtool.model.graph import Operator
from qtool.model.types import Padding

TFLITE_PADDING = {1: Padding.SAME, 2: Padding.VALID}  # TfLitePadding -> schema Padding


def struct_options(op: Operator, fields: Sequence[str]) -> dict[str, int]:
    """The named int32 fields of `op`'s custom options, `padding` as the schema's Padding."""
    raw = op.custom_options or b""
    if len(raw) < 4 * len(fields):
        raise ModelError(
            f"custom options hold {len(raw)} bytes, expected at least {4 * len(fields)} "
            f"({', '.join(fields)})"
        )
    values = dict(zip(fields, np.frombuffer(raw[: 4 * len(fields)], "<i4").tolist(), strict=True))
    if "padding" in values:
        if values["padding"] not in TFLITE_PADDING:
            raise ModelError(f"custom options hold an unknown padding {values['padding']}")
        values["padding"] = TFLITE_PADDING[values["padding"]]
    return values
