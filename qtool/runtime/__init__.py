"""The numpy reference engine that runs float TFLite graphs, and its kernel registry."""

from qtool.runtime.engine import Engine
from qtool.runtime.registry import OpContext, custom_op, load_custom_ops, register_custom_op

__all__ = ["Engine", "OpContext", "custom_op", "load_custom_ops", "register_custom_op"]
