"""Calibration: datasets, range observers, and the calibration run."""

from qtool.calibrate.calibrator import (
    ENGINES,
    CalibrationResult,
    activation_tensors,
    calibrate,
    choose_engine,
)
from qtool.calibrate.datasets import Dataset, load_dataset, synthetic_dataset
from qtool.calibrate.inputs import InputSpec, model_inputs
from qtool.calibrate.observers import MinMaxObserver, RangeObserver

__all__ = [
    "ENGINES",
    "CalibrationResult",
    "Dataset",
    "InputSpec",
    "MinMaxObserver",
    "RangeObserver",
    "activation_tensors",
    "calibrate",
    "choose_engine",
    "load_dataset",
    "model_inputs",
    "synthetic_dataset",
]
