"""Read, write and edit TFLite models (`.tflite` flatbuffers, schema version 3)."""

from qtool.model.graph import Buffer, Model, Operator, OperatorCode, QuantParams, Subgraph, Tensor
from qtool.model.io import load_model, model_to_bytes, parse_model, save_model, write_atomic
from qtool.model.types import BuiltinOperator, TensorType, dtype_name, numpy_dtype, op_type_name

__all__ = [
    "Buffer",
    "BuiltinOperator",
    "Model",
    "Operator",
    "OperatorCode",
    "QuantParams",
    "Subgraph",
    "Tensor",
    "TensorType",
    "dtype_name",
    "load_model",
    "model_to_bytes",
    "numpy_dtype",
    "op_type_name",
    "parse_model",
    "save_model",
    "write_atomic",
]
