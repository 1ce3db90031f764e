"""The HTML page: its sections and charts, escaping, self-containment, and the numbers it draws
(histograms against the samples, per-layer SQNR against the output and analysis figures)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pytest

import qtool
from qtool.display import printable
from qtool.report.html import analysis_html
from qtool.report.pictures import quantize_pictures
from tests.conftest import DATA, MODELS
from tests.quantize.test_cli import assert_error
from tests.quantize.test_cli import qtool as run_qtool
from tests.report.pages import AWKWARD_NAMES, PageOutline, awkward_quantization, fixture_data

QUANTIZE_SECTIONS = ["outputs", "layers", "ranges", "float", "target", "places"]


def test_every_section_of_the_quantize_page_has_a_chart() -> None:
    outline = PageOutline(awkward_quantization().html())
    assert list(outline.svgs) == QUANTIZE_SECTIONS
    assert all(count >= 1 for count in outline.svgs.values()), outline.svgs


def test_names_are_escaped_and_shown_whole() -> None:
    result = awkward_quantization()
    page = result.html()
    names = [row["name"] for row in result.report["accuracy"]["outputs"]]
    assert len(names) == 2
    for name in names:
        assert html.escape(printable(name), quote=True) in page
    shown = {
        html.escape(printable(n.decode("utf-8", "backslashreplace")))
        for n in AWKWARD_NAMES.values()
    }
    assert shown == {
        "class &lt;probs&gt; &amp; &quot;scores&quot;",
        "\\xff\\xfereg\\nout",
        "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;",
    }
    assert all(s in page for s in shown)
    assert "<probs>" not in page and "alert(1)</script>" not in page
    assert PageOutline(page).scripts == 1  # the page's own, not one smuggled in by a name
    page.encode("utf-8")  # strict: every name is valid UTF-8 once escaped


def test_the_page_loads_nothing() -> None:
    page = awkward_quantization().html()
    outline = PageOutline(page)
    assert outline.links and all(link.startswith("#") for link in outline.links)
    assert "url(" not in page and "@import" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert page.count("://") == page.count('xmlns="http://www.w3.org/2000/svg"')


def test_the_page_lists_the_float_ops_and_the_remedies() -> None:
    result = awkward_quantization()
    page = result.html()
    float_ops = result.report["float_ops"]
    assert any(f["op"] == "MEAN" and "keep-float" in f["reason"] for f in float_ops)
    for kept in float_ops:  # the target search may keep more
        assert html.escape(kept["reason"], quote=True) in page
    remedies = result.report["sqnr_target"]["subgraphs"][0]["remedies"]
    assert remedies
    for remedy in remedies:
        assert html.escape(printable(remedy["tensor"]), quote=True) in page


def test_histograms_are_those_of_the_samples() -> None:
    samples = fixture_data("mlp")["serving_default_features:0"]
    result = qtool.quantize_model(MODELS / "mlp.tflite", samples, calibration="percentile:99")
    view = quantize_pictures(result.result)["tensors"][0]
    assert view["name"] == "serving_default_features:0" and view["op"] == "input"
    assert view["data"] == [float(samples.min()), float(samples.max())]
    expected, _ = np.histogram(samples, bins=len(view["counts"]), range=tuple(view["data"]))
    assert sum(view["counts"]) == samples.size  # every value binned (small tensor)
    assert np.abs(np.array(view["counts"]) - expected).sum() <= 0.05 * samples.size
    low, high = view["grid"]
    clipped = float(np.mean((samples < low) | (samples > high)))
    assert clipped > 0.005  # the 99th percentile clips about 2% of values
    assert view["clipped"] == pytest.approx(clipped, abs=2e-3)
    step = view["scale"]
    assert high - low == pytest.approx(255 * step) and low <= 0 <= high


def test_the_output_layer_sqnr_is_the_output_sqnr() -> None:
    data = fixture_data("cnn")
    holdout = {k: v[:16] for k, v in fixture_data("cnn", "holdout").items()}
    result = qtool.quantize_model(MODELS / "cnn.tflite", data, holdout=holdout, layer_sqnr=True)
    layers = {row["tensor"]: row["sqnr_db"] for row in quantize_pictures(result.result)["layers"]}
    ((name, output_db),) = result.accuracy.items()
    # Layers are simulated; the reported accuracy is the int8 model's in LiteRT (kernel
    # rounding apart, the same: test_simulate's bar).
    assert "measured in LiteRT" in result.report["accuracy"]["source"]
    assert layers[name] == pytest.approx(output_db, abs=0.5)
    assert len(layers) == 10 and all(v is not None and v > 10 for v in layers.values())


def test_the_layer_chart_measures_the_plan_whose_accuracy_is_reported() -> None:
    result = qtool.quantize_model(
        MODELS / "cnn.tflite", fixture_data("cnn"), analyze=True, layer_sqnr=True
    )
    layers = {row["tensor"]: row["sqnr_db"] for row in quantize_pictures(result.result)["layers"]}
    (analysed,) = result.report["analysis"]["subgraphs"]
    assert layers.keys() == analysed["layer_sqnr_db"].keys()  # the same quantized activations
    # Its last layer is the output: simulated on the estimate's samples, as LiteRT measured it.
    (output,) = result.report["accuracy"]["outputs"]
    assert layers[output["name"]] == pytest.approx(output["sqnr_db"], abs=0.5)


def test_the_analysis_page_from_the_api_dict() -> None:
    analysis = qtool.analyze_model(MODELS / "mixed_ops.tflite", fixture_data("mixed_ops"))
    page = analysis_html(analysis)
    outline = PageOutline(page)
    assert list(outline.svgs) == ["outputs", "layers", "places"]  # no histograms given
    assert all(count >= 1 for count in outline.svgs.values())
    for sub in analysis["subgraphs"]:
        for name in sub["output_sqnr_db"]:
            assert html.escape(name) in page
        for place in sub["places"][:15]:
            assert html.escape(place["tensor"]) in page and (place["recommended"] or "-") in page


def test_quantize_html_writes_the_page_with_the_model(tmp_path: Path) -> None:
    out, page = tmp_path / "cnn_int8.tflite", tmp_path / "cnn.html"
    result = run_qtool(
        "quantize", str(MODELS / "cnn.tflite"), "--data", str(DATA / "cnn_calib.npz"),
        "-o", str(out), "--html", str(page),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"page: {page}" in result.stdout
    report = json.loads((tmp_path / "cnn_int8.report.json").read_text())
    text = page.read_text(encoding="utf-8")
    assert list(PageOutline(text).svgs) == ["outputs", "layers", "ranges", "float"]
    assert f"{report['output_model']['size_bytes']:,}" in text
    assert text.count('<figure class="card"') == 11  # the input and every op's output


def test_quantize_html_refuses_like_other_outputs(tmp_path: Path) -> None:
    model = tmp_path / "cnn.tflite"
    model.write_bytes((MODELS / "cnn.tflite").read_bytes())
    data = tmp_path / "calib.npz"
    data.write_bytes((DATA / "cnn_calib.npz").read_bytes())
    base = ["quantize", str(model), "--data", str(data), "-o", str(tmp_path / "q.tflite")]
    assert_error(run_qtool(*base, "--html", str(data)), "refusing to overwrite the input file")
    assert_error(run_qtool(*base, "--html", str(tmp_path / "q.tflite")), "different files")
    existing = tmp_path / "page.html"
    existing.write_text("mine")
    assert_error(run_qtool(*base, "--html", str(existing)), "already exists")
    assert existing.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib.npz", "cnn.tflite", "page.html"]
    result = run_qtool(*base, "--html", str(existing), "--force")
    assert result.returncode == 0, result.stderr
    assert existing.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_analyze_html_writes_the_page(tmp_path: Path) -> None:
    page, output = tmp_path / "analysis.html", tmp_path / "analysis.json"
    model, data = str(MODELS / "mixed_ops.tflite"), str(DATA / "mixed_ops_calib.npz")
    assert_error(
        run_qtool("analyze", model, "--data", data, "-o", str(page), "--html", str(page)),
        "different files",
    )
    result = run_qtool("analyze", model, "--data", data, "-o", str(output), "--html", str(page))
    assert result.returncode == 0, result.stderr
    text = page.read_text(encoding="utf-8")
    outline = PageOutline(text)
    assert list(outline.svgs) == ["outputs", "layers", "places", "ranges"]
    assert all(count >= 1 for count in outline.svgs.values())
    (analysed,) = json.loads(output.read_text())["subgraphs"]
    for name in analysed["layer_sqnr_db"]:  # every measured activation has its histogram
        assert f'data-name="{html.escape(name.lower(), quote=True)}"' in text


def test_the_page_shows_each_outputs_kind_and_measures() -> None:
    result = qtool.quantize_model(MODELS / "multi_io.tflite", fixture_data("multi_io"))
    page = result.html()
    kinds = sorted(row["kind"] for row in result.report["accuracy"]["outputs"])
    assert kinds == ["classes", "regression"]
    outputs = page[page.index('id="outputs"') : page.index('id="layers"')]
    for row in result.report["accuracy"]["outputs"]:
        assert f"<td>{row['kind']}</td>" in outputs
    assert "top-1 " in outputs and "relative error " in outputs
    assert "fitting" in outputs and "per sample min / median" in outputs
