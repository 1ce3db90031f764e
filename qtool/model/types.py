"""Names and numpy dtypes for the schema's enums (TensorType, BuiltinOperator, ...)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import numpy as np

from qtool.model.reflect import enum_members

__all__ = [
    "ActivationFunctionType",
    "BuiltinOperator",
    "DimensionType",
    "Padding",
    "TensorType",
    "activation_name",
    "builtin_code",
    "dtype_name",
    "known_builtin",
    "known_tensor_type",
    "numpy_dtype",
    "op_type_name",
    "padding_name",
    "tensor_type",
    "tensor_types",
]


def _schema_enum(name: str) -> type:
    """A schema enum as a class of int constants (`TensorType.INT8`), like flatc's classes."""
    return type(name, (), {"__module__": __name__, **enum_members(name)})


ActivationFunctionType = _schema_enum("ActivationFunctionType")
BuiltinOperator = _schema_enum("BuiltinOperator")
DimensionType = _schema_enum("DimensionType")
Padding = _schema_enum("Padding")
TensorType = _schema_enum("TensorType")


def _enum_names(enum_cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


_OPERATOR_NAMES = _enum_names(BuiltinOperator)
_TYPE_NAMES = _enum_names(TensorType)
_ACTIVATION_NAMES = _enum_names(ActivationFunctionType)
_PADDING_NAMES = _enum_names(Padding)

_NUMPY_DTYPES: dict[int, np.dtype] = {
    TensorType.FLOAT32: np.dtype("<f4"),
    TensorType.FLOAT16: np.dtype("<f2"),
    TensorType.FLOAT64: np.dtype("<f8"),
    TensorType.INT8: np.dtype("i1"),
    TensorType.UINT8: np.dtype("u1"),
    TensorType.INT16: np.dtype("<i2"),
    TensorType.UINT16: np.dtype("<u2"),
    TensorType.INT32: np.dtype("<i4"),
    TensorType.UINT32: np.dtype("<u4"),
    TensorType.INT64: np.dtype("<i8"),
    TensorType.UINT64: np.dtype("<u8"),
    TensorType.BOOL: np.dtype("?"),
    TensorType.COMPLEX64: np.dtype("<c8"),
    TensorType.COMPLEX128: np.dtype("<c16"),
    # INT4 is stored packed, two values a byte; BFLOAT16 has no numpy type: both read as raw bits.
    TensorType.INT4: np.dtype("u1"),
    TensorType.BFLOAT16: np.dtype("<u2"),
}


def tensor_types(names: Iterable[str]) -> frozenset[int]:
    """The TensorType codes of type names (a type class of `schemas/ops.json`, say)."""
    return frozenset(getattr(TensorType, name) for name in names)


def activation_name(code: int) -> str:
    """The schema's name of a fused activation function code ("RELU6")."""
    return _ACTIVATION_NAMES.get(code, str(code))


def padding_name(code: int) -> str:
    """The schema's name of a Padding code ("SAME")."""
    return _PADDING_NAMES.get(code, str(code))


def known_builtin(code: int) -> bool:
    """Whether the schema defines builtin operator code `code`."""
    return code in _OPERATOR_NAMES


def known_tensor_type(code: int) -> bool:
    """Whether the schema defines tensor type code `code`."""
    return code in _TYPE_NAMES


def op_type_name(code: int) -> str:
    """The schema's name of a builtin operator code ("CONV_2D"); BUILTIN_<code> for an unknown
    one."""
    return _OPERATOR_NAMES.get(code, f"BUILTIN_{code}")


@functools.cache
def builtin_code(name: str) -> int:
    """The BuiltinOperator code of an operator name; KeyError for an unknown name."""
    try:
        return getattr(BuiltinOperator, name)
    except AttributeError:
        raise KeyError(f"unknown builtin operator {name!r}") from None


def dtype_name(code: int) -> str:
    """The schema's name of a tensor type code ("INT8"); TYPE_<code> for an unknown one."""
    return _TYPE_NAMES.get(code, f"TYPE_{code}")


def numpy_dtype(code: int) -> np.dtype:
    """The numpy dtype of a tensor type's stored elements (raw bits for INT4/BFLOAT16)."""
    try:
        return _NUMPY_DTYPES[code]
    except KeyError:
        raise KeyError(f"tensor type {dtype_name(code)} has no numpy equivalent") from None


def tensor_type(dtype: np.dtype | type | str) -> int:
    """The TensorType code of a numpy dtype."""
    wanted = np.dtype(dtype).newbyteorder("<") if np.dtype(dtype).itemsize > 1 else np.dtype(dtype)
    for code, candidate in _NUMPY_DTYPES.items():
        if code in (TensorType.INT4, TensorType.BFLOAT16):
            continue
        if candidate == wanted:
            return code
    raise KeyError(f"numpy dtype {np.dtype(dtype)} has no TFLite tensor type")
