"""Reports: the JSON record of a quantization run."""

from qtool.report.quantize_report import build_report, file_facts, summary_counts

__all__ = ["build_report", "file_facts", "summary_counts"]
