"""The HTML page of a quantization (`qtool quantize --html`) or an analysis (`qtool analyze
--html`): one self-contained file, inline CSS and SVG and a few lines of script, that loads
nothing (its Content-Security-Policy forbids any fetch) and reads well printed.

Pure functions from the report dicts (and the histograms of `pictures.py`) to the page text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qtool.quantize.accuracy import LITERT
from qtool.report.html_sections import (
    Section,
    db_text,
    float_section,
    layers_section,
    outputs_section,
    places_section,
    ranges_section,
    target_section,
)
from qtool.report.quantize_report import summary_counts
from qtool.report.svg import text
from qtool.version import __version__

POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'"

STYLE = """
:root { --ink: #1f2430; --muted: #5b6270; --line: #d9dce3; --good: #2e8b57;
  --fair: #d99a1e; --poor: #c8423b; --accent: #3569b5; --paper: #fff; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1120px; padding: 24px 28px 48px; color: var(--ink);
  background: var(--paper); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 0 0 6px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
header p { margin: 2px 0; color: var(--muted); }
code { font: 12px ui-monospace, "DejaVu Sans Mono", monospace; word-break: break-all; }
nav { margin: 14px 0 6px; display: flex; gap: 14px; flex-wrap: wrap; }
nav a { color: var(--accent); text-decoration: none; }
section { border-top: 1px solid var(--line); padding: 16px 0 8px; }
section > p { max-width: 880px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 12px 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
ul.warnings { color: #8a5a00; padding-left: 18px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th { white-space: nowrap; }
th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid var(--line);
  vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
svg { display: block; font: 12px system-ui, sans-serif; }
svg.chart { width: 100%; max-width: 760px; height: auto; margin: 6px 0; }
svg.strip { width: 100%; max-width: 760px; height: 28px; }
svg .label, svg .value { fill: var(--ink); } svg .axis { fill: var(--muted); font-size: 11px; }
svg .tick { stroke: #eceef2; } svg .baseline { stroke: #9aa0ab; }
.good { fill: var(--good); } .fair { fill: var(--fair); } .poor { fill: var(--poor); }
.exact { fill: #9cc9a9; } .method { fill: #a9b3c4; } .chosen { fill: #55657f; }
.place-weights, .kind-rounding { fill: #7d6bb3; background: #7d6bb3; }
.place-activation, .kind-int16 { fill: var(--accent); background: var(--accent); }
.place-calls { fill: #b3866b; background: #b3866b; }
.kind-float { fill: var(--poor); background: var(--poor); }
svg .mark { fill: #fff; stroke: var(--ink); stroke-width: 1.2; }
svg .reference, svg .target { stroke-width: 1.5; stroke-dasharray: 5 4; }
svg .reference { stroke: var(--muted); } svg .target { stroke: var(--poor); }
svg .trace { fill: none; stroke: #9aa0ab; stroke-width: 1.2; }
svg .dot { stroke: #fff; stroke-width: 0.6; }
svg circle.exact { fill: #fff; stroke: var(--good); stroke-width: 1.2; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr));
  gap: 10px; }
figure.card { margin: 0; padding: 8px; border: 1px solid var(--line); border-radius: 6px; }
figure.card figcaption { font-size: 12px; height: 3em; overflow: hidden;
  display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2; }
figure.card .op { color: var(--muted); font-size: 11px; }
figure.card .facts { margin: 2px 0 0; font-size: 11px; color: var(--muted); }
.clip.notable { color: var(--poor); font-weight: 600; }
svg.histogram { width: 100%; height: auto; }
svg .counts { fill: #55657f; } svg .grid, .key.grid { fill: #dce8f7; background: #dce8f7; }
svg .range { stroke: var(--poor); stroke-width: 1.4; } svg .zero { stroke: #9aa0ab; }
.key { display: inline-block; width: 12px; height: 12px; vertical-align: -1px;
  margin: 0 3px 0 8px; border-radius: 2px; }
.key.range { background: var(--poor); width: 3px; }
.mode-int8 { fill: var(--good); background: var(--good); }
.mode-int16 { fill: var(--accent); background: var(--accent); }
.mode-float { fill: var(--poor); background: var(--poor); }
.mode-integer { fill: #9aa0ab; background: #9aa0ab; }
.mode-folded { fill: #d5d8de; background: #d5d8de; }
footer { margin-top: 24px; color: var(--muted); font-size: 12px; }
@media print { nav, #filter { display: none; } figure.card { break-inside: avoid; } }
"""

# Filters the histogram cards by name; the last line marks the page as rendered (the browser
# test reads it: it is only reached when the script ran without an error).
SCRIPT = """
(function () {
  var input = document.getElementById("filter");
  if (input) {
    var cards = Array.prototype.slice.call(document.querySelectorAll("figure.card"));
    var shown = document.getElementById("shown");
    input.addEventListener("input", function () {
      var wanted = input.value.toLowerCase();
      var count = 0;
      cards.forEach(function (card) {
        var keep = card.getAttribute("data-name").indexOf(wanted) >= 0;
        card.hidden = !keep;
        count += keep ? 1 : 0;
      });
      shown.textContent = String(count);
    });
  }
  document.documentElement.setAttribute("data-rendered", "yes");
})();
"""


def _page(title: str, header: str, sections: Sequence[Section], version: str) -> str:
    nav = "".join(f'<a href="#{s.anchor}">{text(s.title)}</a>' for s in sections)
    body = "".join(
        f'<section id="{s.anchor}"><h2>{text(s.title)}</h2>{s.body}</section>' for s in sections
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text(title)}</title><style>{STYLE}</style></head><body>"
        f"<header>{header}</header><nav>{nav}</nav>{body}"
        f"<footer>qtool {text(version)}</footer><script>{SCRIPT}</script></body></html>\n"
    )


def _facts(rows: Sequence[tuple[str, str]]) -> str:
    return (
        '<dl class="facts">'
        + "".join(f"<dt>{text(k)}</dt><dd>{text(v)}</dd>" for k, v in rows)
        + "</dl>"
    )


def _warnings(warnings: Sequence[str]) -> str:
    if not warnings:
        return ""
    return '<ul class="warnings">' + "".join(f"<li>{text(w)}</li>" for w in warnings) + "</ul>"


def _worst(values: Sequence[float | None]) -> float | None:
    return min((v for v in values if v is not None), default=None)


def quantize_html(report: dict[str, Any], pictures: dict[str, Any] | None = None) -> str:
    """The page of a quantization report (`build_report`), with `pictures`
    (`pictures.quantize_pictures`): per-layer SQNR and histograms, when available."""
    pictures = pictures or {}
    accuracy = report["accuracy"]
    outputs = accuracy["outputs"]
    target = report["sqnr_target"]
    goal = None if target is None else target["sqnr_db"]
    counts = summary_counts(report)
    source, result = report["input_model"], report["output_model"]
    samples = sum(c["samples"] for c in report["calibration"])
    audit = report["audit"]
    header = (
        "<h1>qtool quantize</h1>"
        f"<p><code>{text(source['path'] or 'model in memory')}</code> → "
        f"<code>{text(result['path'] or 'model in memory')}</code></p>"
        + _facts(
            [
                ("size", f"{source['size_bytes']:,} → {result['size_bytes']:,} bytes"),
                ("calibration", f"{samples} samples, {accuracy['method']} ranges"),
                ("operators", ", ".join(f"{counts[m]} {m}" for m in counts if counts[m])),
                (
                    "worst output",
                    f"{db_text(_worst([o['fitting_sqnr_db'] for o in outputs]))} dB (fitting SQNR)"
                    if outputs
                    else "not measured",
                ),
                ("audit", f"{audit['errors']} errors, {audit['warnings']} warnings"),
            ]
        )
        + _warnings(report["warnings"])
    )
    sections = [
        outputs_section(outputs, accuracy["source"] or "", goal, accuracy["method_scores_db"]),
        layers_section(pictures.get("layers", []), _worst([o["sqnr_db"] for o in outputs]), goal),
        ranges_section(pictures.get("tensors", [])),
        float_section(report["ops"], report["float_ops"]),
    ]
    if target is not None:
        sections.append(target_section(target, outputs))
    if report.get("analysis"):
        sections.append(places_section(report["analysis"]))
    title = f"qtool quantize: {source['path'] or 'model'}"
    return _page(title, header, sections, report["qtool_version"])


def _analysis_layers(sub: dict[str, Any]) -> list[dict[str, Any]]:
    """The analysis' per-layer SQNR as chart rows, with each tensor's producer from its place."""
    producers = {p["tensor"]: p["op"] for p in sub["places"] if p["place"] == "activation"}
    return [
        {"subgraph": sub["subgraph"], "tensor": name, "op": producers.get(name), "sqnr_db": db}
        for name, db in sub["layer_sqnr_db"].items()
    ]


def _measured_on(analysis: dict[str, Any]) -> str:
    """How the analysis' output SQNRs were measured, in words."""
    subgraphs = analysis["subgraphs"]
    samples = sum(sub.get("output_samples", sub["samples"]) for sub in subgraphs)
    litert = all(sub.get("outputs_measured_in") == LITERT for sub in subgraphs)
    how = "measured in LiteRT" if litert else "simulated"
    return f"{how} on {samples} samples of the {analysis['samples_from']}"


def analysis_html(analysis: dict[str, Any], tensors: Sequence[dict[str, Any]] = ()) -> str:
    """The page of an analysis (`qtool analyze --json`, `qtool.analyze`), with the histograms of
    the analysed plan (`pictures.analysis_histograms`) when given."""
    subgraphs = analysis["subgraphs"]
    outputs = [
        {"subgraph": sub["subgraph"], "name": name, "sqnr_db": db}
        for sub in subgraphs
        for name, db in sub["output_sqnr_db"].items()
    ]
    model = analysis.get("model") or "model"
    header = f"<h1>qtool analyze</h1><p><code>{text(model)}</code></p>" + _facts(
        [
            ("ranges", analysis["method"]),
            ("samples", f"{sum(s['samples'] for s in subgraphs)} ({analysis['samples_from']})"),
            ("worst output", f"{db_text(_worst([o['sqnr_db'] for o in outputs]))} dB"),
        ]
    )
    sections = [
        outputs_section(outputs, _measured_on(analysis)),
        layers_section(
            [row for sub in subgraphs for row in _analysis_layers(sub)],
            _worst([o["sqnr_db"] for o in outputs]),
        ),
        places_section(analysis),
    ]
    if tensors:
        sections.append(ranges_section(tensors))
    return _page(f"qtool analyze: {model}", header, sections, __version__)
