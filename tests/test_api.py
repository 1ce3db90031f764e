"""The Python API: one call per command, models and data as Python objects."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

import qtool
from qtool.calibrate import Dataset
from qtool.errors import DataError, UsageError
from qtool.model import load_model
from tests.conftest import DATA, MODELS
from tests.quantize.test_subgraphs import two_signature_model

MLP = MODELS / "mlp.tflite"
MULTI = MODELS / "multi_io.tflite"


def mlp_samples() -> np.ndarray:
    return np.load(DATA / "mlp_calib.npz")["serving_default_features:0"]


def multi_samples() -> dict[str, np.ndarray]:
    data = np.load(DATA / "multi_io_calib.npz")
    return {key: data[key] for key in data.files}


def test_the_api_functions_are_the_package_attributes() -> None:
    from qtool import analyze_model, calibrate_model, check_model, quantize_model

    assert all(map(callable, (quantize_model, check_model, calibrate_model, analyze_model)))
    import qtool.check.audit  # the subpackages stay importable, and never shadow the API
    from qtool.quantize import QuantizeOptions

    assert QuantizeOptions().io == "float"
    assert callable(qtool.check.audit.check_loaded)
    assert callable(qtool.quantize_model) and callable(qtool.check_model)
    assert type(qtool) is type(json)  # a plain module: no class swapped in


def test_import_qtool_is_cheap() -> None:
    code = "import sys, qtool; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "form",
    ["array", "path", "paths", "dict", "dataset", "generator", "iterable", "one_array_samples"],
)
def test_every_data_form_gives_the_same_model(form: str) -> None:
    samples = mlp_samples()
    forms = {
        "array": samples,
        "path": DATA / "mlp_calib.npz",
        "paths": [str(DATA / "mlp_calib.npz")],
        "dict": {"features": samples},
        "dataset": Dataset.from_arrays([samples]),
        "generator": lambda: ([s[None]] for s in samples),
        "iterable": iter([{"features": s} for s in samples]),
        "one_array_samples": [s for s in samples],
    }
    options = {"calibration": "minmax", "bias_correction": False}
    expected = qtool.quantize_model(MLP, samples, **options).model_bytes
    assert qtool.quantize_model(MLP, forms[form], **options).model_bytes == expected


def test_models_as_path_bytes_or_model_give_the_same_result() -> None:
    samples = mlp_samples()
    options = {"calibration": "minmax"}
    by_path = qtool.quantize_model(MLP, samples, **options)
    by_bytes = qtool.quantize_model(MLP.read_bytes(), samples, **options)
    by_model = qtool.quantize_model(load_model(MLP), samples, **options)
    assert by_path.model_bytes == by_bytes.model_bytes == by_model.model_bytes
    assert by_path.report["input_model"]["path"] == str(MLP)
    assert by_bytes.report["input_model"]["path"] is None


def test_multi_input_model_takes_a_dict_or_a_list() -> None:
    data = multi_samples()
    by_dict = qtool.quantize_model(MULTI, data, calibration="minmax")
    model = load_model(MULTI)
    names = [model.subgraphs[0].tensors[t].name for t in model.subgraphs[0].inputs]
    by_list = qtool.quantize_model(MULTI, [data[n] for n in names], calibration="minmax")
    assert by_dict.model_bytes == by_list.model_bytes


def test_several_signatures_take_data_by_key() -> None:
    model = two_signature_model()
    rng = np.random.default_rng(0)
    data = {
        "encode": rng.standard_normal((16, 8)).astype(np.float32),
        "decode": rng.standard_normal((16, 4)).astype(np.float32),
    }
    result = qtool.quantize_model(model, data)
    assert sorted(result.result.calibrations) == [0, 1]
    with pytest.raises(UsageError, match="dict keyed by signature"):
        qtool.quantize_model(model, data["encode"])


def test_bad_inputs_raise_library_errors_naming_parameters() -> None:
    with pytest.raises(UsageError, match="needs data"):
        qtool.quantize_model(MLP)
    with pytest.raises(UsageError, match="cannot use a int"):
        qtool.quantize_model(MLP, 3)
    with pytest.raises(UsageError, match="`io` must be one of"):
        qtool.quantize_model(MLP, mlp_samples(), io="int4")
    with pytest.raises(DataError, match="expects samples of shape"):
        qtool.quantize_model(MLP, np.zeros((4, 7), np.float32))
    with pytest.raises(UsageError, match="both reference and data"):
        qtool.check_model(MLP, reference=MLP)
    with pytest.raises(UsageError, match="model must be a path"):
        qtool.load_model(3.5)


def test_an_error_in_the_users_generator_is_one_data_error() -> None:
    def broken():
        yield [mlp_samples()[:1]]
        raise OSError("camera offline")

    with pytest.raises(DataError, match="broken raised OSError: camera offline at sample 1"):
        qtool.quantize_model(MLP, broken)


def test_save_writes_model_and_report_with_a_normal_mode(tmp_path) -> None:
    result = qtool.quantize_model(MLP, mlp_samples())
    path = result.save(tmp_path / "m.tflite")
    report = json.loads((tmp_path / "m.report.json").read_text())
    assert report["output_model"]["path"] == str(path)
    assert path.read_bytes() == result.model_bytes
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    with pytest.raises(UsageError, match="already exists"):
        result.save(path)
    result.save(path, force=True)


def test_check_verdicts_and_accuracy_gate() -> None:
    samples = mlp_samples()
    quantized = qtool.quantize_model(MLP, samples)
    assert qtool.check_model(quantized.model_bytes).passed
    float_audit = qtool.check_model(MLP)
    assert not float_audit.passed and float_audit.errors[0].rule == "QT-NOT-QUANTIZED"
    gate = qtool.check_model(quantized.model_bytes, reference=MLP, data=samples[:16], min_sqnr=90)
    assert not gate.passed and gate.accuracy["outputs"][0]["sqnr_db"] < 90
    assert qtool.check_model(
        quantized.model_bytes, reference=MLP, data=samples[:16], min_sqnr=10
    ).passed
    assert json.dumps(gate.to_dict())


def test_statistics_from_shards_equal_one_calibration() -> None:
    samples = mlp_samples()
    shards = qtool.calibrate_model(MLP, samples[:20])
    shards.merge(qtool.calibrate_model(MLP, samples[20:]))
    whole = qtool.calibrate_model(MLP, samples)
    assert shards.state() == whole.state()
    from_stats = qtool.quantize_model(MLP, statistics=shards, calibration="mse")
    from_data = qtool.quantize_model(MLP, samples, calibration="mse", holdout=samples[:1])
    assert from_stats.model_bytes == from_data.model_bytes


def test_statistics_of_another_model_are_refused() -> None:
    stats = qtool.calibrate_model(MLP, mlp_samples())
    with pytest.raises(DataError, match="another model"):
        qtool.quantize_model(MODELS / "unit_norm.tflite", statistics=stats)


def test_analyze_returns_the_places_worst_first() -> None:
    analysis = qtool.analyze_model(MLP, mlp_samples())
    places = analysis["subgraphs"][0]["places"]
    worst = [p["alone_worst_db"] for p in places if p["alone_worst_db"] is not None]
    assert worst == sorted(worst)
    assert places[0]["remedies"]
