"""`qtool check`: audit quantized TFLite models against the int8 spec (`schemas/int8_spec.json`)."""

from qtool.check.audit import AccuracyGate, audit_model, check_loaded, check_paths
from qtool.check.findings import SEVERITIES, Finding, ModelResult
from qtool.check.rulebook import RuleInfo
from qtool.check.rules import RULES

__all__ = [
    "RULES",
    "SEVERITIES",
    "AccuracyGate",
    "Finding",
    "ModelResult",
    "RuleInfo",
    "audit_model",
    "check_loaded",
    "check_paths",
]
