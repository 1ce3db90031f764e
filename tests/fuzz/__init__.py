"""Robustness fuzzing of the qtool CLI: hostile models, data, output paths and signals.

`python -m tests.fuzz` (`make fuzz`) runs the long campaign; `tests/robustness/` runs a bounded,
seeded slice of it in `make test`.
"""
