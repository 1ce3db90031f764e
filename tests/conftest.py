"""Shared fixtures: the committed models and data under fixtures/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
MODELS = FIXTURES / "models"
DATA = FIXTURES / "data"


def manifest() -> dict:
    return json.loads((FIXTURES / "manifest.json").read_text())


def float_model_names() -> list[str]:
    return sorted(p.stem for p in MODELS.glob("*.tflite"))


def tf_int8_model_paths() -> list[Path]:
    return sorted((MODELS / "tf_int8").glob("*.tflite"))


@pytest.fixture
def tmp_model_dir(tmp_path: Path) -> Path:
    return tmp_path
