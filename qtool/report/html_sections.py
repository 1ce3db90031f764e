"""The sections of the HTML page, each a heading, a sentence on how to read it, a chart and
the numbers behind it. Pure functions from report data to HTML text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from qtool.calibrate.collect import MIN_SAMPLES_FOR_HOLDOUT
from qtool.quantize.accuracy import measures_text
from qtool.report.quantize_report import REPORTED_MODES
from qtool.report.svg import (
    Bar,
    Line,
    Mark,
    Point,
    bar_chart,
    histogram_chart,
    line_chart,
    number,
    strip,
    text,
)
from qtool.spec import default_min_sqnr

GOOD_DB = 30.0  # at or above: green; between the accuracy gate's default and this: amber
WORST_SHOWN = 10  # lowest layers listed under the chart
PLACES_SHOWN = 15  # most damaging places charted and listed
CLIPPED_NOTABLE = 1e-3  # a share of values outside the grid worth pointing at


@dataclass(frozen=True)
class Section:
    """One section of the HTML page: its anchor id, its heading, and its body as HTML."""

    anchor: str
    title: str
    body: str


def quality(db: float | None, target: float | None = None) -> str:
    """The CSS class of an SQNR: against the target when there is one, else against the
    accuracy gate's default (poor below) and GOOD_DB (good at or above)."""
    if db is None:
        return "exact"
    if target is not None:
        return "good" if db >= target else "poor"
    return "good" if db >= GOOD_DB else "fair" if db >= default_min_sqnr() else "poor"


def db_text(db: float | None) -> str:
    """An SQNR as the page shows it: one decimal, or "exact" for None (no noise)."""
    return "exact" if db is None else f"{db:.1f}"


def _sortable(db: float | None) -> float:
    return float("inf") if db is None else db


def table(
    columns: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()
) -> str:
    """An HTML table of already escaped cells; `numeric` columns align right."""
    head = "".join(f"<th>{text(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{cell}</td>' if i in numeric else f"<td>{cell}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _named(name: str, subgraph: int, several: bool) -> str:
    return f"[{subgraph}] {name}" if several else name


def outputs_section(
    outputs: Sequence[dict[str, Any]],
    source: str,
    target: float | None = None,
    method_scores: dict[str, float | None] | None = None,
) -> Section:
    """Each output's SQNR against the float model (rows: subgraph, name, sqnr_db; with the
    quantize report's records, also kind, fitting_sqnr_db, spread and measures)."""
    several = len({o["subgraph"] for o in outputs}) > 1
    if not outputs:
        return Section(
            "outputs",
            "Output SQNR",
            f"<p>Not measured: no held-out samples (it takes {MIN_SAMPLES_FOR_HOLDOUT} calibration "
            "samples or more, or a held-out dataset).</p>",
        )
    records = all("kind" in o for o in outputs)
    key = "fitting_sqnr_db" if records else "sqnr_db"
    bars = [
        Bar(
            _named(o["name"], o["subgraph"], several),
            o[key],
            f"{o['name']}: {db_text(o[key])} dB",
            quality(o[key], target),
        )
        for o in outputs
    ]
    lines = [Line(target, "target", "target")] if target is not None else []
    body = (
        f"<p>Signal-to-quantization-noise ratio of each model output against the float model, "
        f"{text(source)}. Higher is better; every 6 dB halves the error.</p>"
    )
    if records:
        body += (
            "<p>Charted: each output's <em>fitting</em> SQNR, the one choices and targets use: "
            "the plain SQNR, or for a probability (and a detector's score read as one) the "
            "SQNR of its distance to the 0.5 threshold. The table gives each output's kind, "
            "from the graph and the values, and the measures that fit it.</p>"
        )
    body += bar_chart(bars, "output SQNR", lines)
    if records:
        body += table(
            ("output", "kind", "SQNR dB", "fitting dB", "per sample min / median", "measures"),
            [
                (
                    text(_named(o["name"], o["subgraph"], several)),
                    text(o["kind"] + (" (SQNR set by its grid)" if o["floored"] else "")),
                    db_text(o["sqnr_db"]),
                    db_text(o["fitting_sqnr_db"]),
                    f"{db_text(o['sample_min_db'])} / {db_text(o['sample_median_db'])}",
                    text(measures_text(o["measures"])),
                )
                for o in outputs
            ],
            numeric=(2, 3, 4),
        )
    if method_scores:
        best = max(method_scores, key=lambda m: _sortable(method_scores[m]))
        scores = [
            Bar(
                method,
                score,
                f"{method}: {db_text(score)} dB",
                "chosen" if method == best else "method",
            )
            for method, score in method_scores.items()
        ]
        body += (
            "<h3>Calibration methods tried</h3><p>Each candidate's score (its worst output's "
            "fitting SQNR on the selection fold, fitted without it); the best one was used.</p>"
            + bar_chart(scores, "calibration method scores")
        )
    return Section("outputs", "Output SQNR", body)


def layers_section(
    layers: Sequence[dict[str, Any]], worst_output: float | None, target: float | None = None
) -> Section:
    """Each quantized activation's SQNR along the graph (rows: tensor, op, sqnr_db)."""
    title = "SQNR along the graph"
    if not layers:
        return Section(
            "layers",
            title,
            "<p>Not measured: it takes held-out samples, and from Python "
            "<code>quantize(..., layer_sqnr=True)</code>.</p>",
        )
    points = [
        Point(
            row["sqnr_db"],
            f"#{i} {row['tensor']} ({row.get('op') or '?'}): {db_text(row['sqnr_db'])} dB",
            quality(row["sqnr_db"], target),
        )
        for i, row in enumerate(layers)
    ]
    lines = []
    if worst_output is not None:
        lines.append(Line(worst_output, "worst output"))
    if target is not None:
        lines.append(Line(target, "target", "target"))
    order = sorted(range(len(layers)), key=lambda i: _sortable(layers[i]["sqnr_db"]))
    rows = [
        (
            str(i),
            f"<code>{text(layers[i]['tensor'])}</code>",
            text(layers[i].get("op") or ""),
            db_text(layers[i]["sqnr_db"]),
        )
        for i in order[:WORST_SHOWN]
    ]
    body = (
        "<p>Each quantized activation against the same tensor of the float model, the whole "
        "quantized model simulated up to it: where along the graph the error builds up. A drop "
        "points at the layer that adds the noise.</p>"
        + line_chart(points, "activation SQNR along the graph", lines)
        + f"<h3>The {len(rows)} lowest</h3>"
        + table(("#", "tensor", "op", "SQNR dB"), rows, numeric=(0, 3))
    )
    return Section("layers", title, body)


def _card(view: dict[str, Any], several: bool) -> str:
    clipped = view["clipped"]
    notable = " notable" if clipped >= CLIPPED_NOTABLE else ""
    low, high = view["range"]
    data_low, data_high = view["data"]
    span = max(abs(data_low), abs(data_high))
    name = text(_named(view["name"], view["subgraph"], several))
    return (
        f'<figure class="card" data-name="{text(view["name"].lower())}">'
        f'<figcaption title="{name}"><code>{name}</code> <span class="op">{text(view["op"])}'
        "</span></figcaption>"
        + histogram_chart(view, f"histogram of {view['name']}")
        + f'<p class="facts">values [{number(data_low, span)}, {number(data_high, span)}] · '
        f"range [{number(low, span)}, {number(high, span)}] · step {number(view['scale'])} "
        f'({text(view["dtype"])}) · <span class="clip{notable}">clipped '
        f"{100 * clipped:.2g}%</span></p></figure>"
    )


def ranges_section(tensors: Sequence[dict[str, Any]]) -> Section:
    """Each activation's histogram against its calibrated range and integer grid."""
    title = "Calibrated ranges"
    if not tensors:
        return Section("ranges", title, "<p>No activation histograms.</p>")
    clipping = sum(v["clipped"] >= CLIPPED_NOTABLE for v in tensors)
    several = len({v["subgraph"] for v in tensors}) > 1
    body = (
        "<p>Each quantized activation's values on the calibration samples (bar height: log of "
        'the count) against <span class="key grid"></span> the span its integer grid covers '
        '(one step apart) and <span class="key range"></span> the range calibration chose '
        "(widened to include 0, or shared with other tensors, it gives the grid). Values outside "
        f"the grid are clipped; {clipping} of {len(tensors)} tensors clip more than "
        f"{100 * CLIPPED_NOTABLE:g}% of theirs.</p>"
        '<p><label>Filter by name <input id="filter" type="search" autocomplete="off"></label> '
        f'<span id="shown">{len(tensors)}</span> shown</p>'
        '<div class="cards">' + "".join(_card(v, several) for v in tensors) + "</div>"
    )
    return Section("ranges", title, body)


def float_section(ops: Sequence[dict[str, Any]], float_ops: Sequence[dict[str, Any]]) -> Section:
    """Every operator along the graph by how it runs, and those left in float with why."""
    graph_ops = [row for row in ops if row["index"] is not None]
    cells = [
        (
            f"mode-{row['mode']}",
            f"#{row['index']} {row['op']}: {row['mode']}"
            + (f" ({row['reason']})" if row.get("reason") else ""),
        )
        for row in graph_ops
    ]
    counts = {mode: sum(row["mode"] == mode for row in graph_ops) for mode in REPORTED_MODES}
    legend = " ".join(
        f'<span class="key mode-{mode}"></span>{mode} {count}'
        for mode, count in counts.items()
        if count
    )
    body = f"<p>Every operator of the input model in order: {legend}.</p>" + strip(
        cells, "operators by how they run"
    )
    if float_ops:
        rows = [
            (str(f["subgraph"]), str(f["index"]), text(f["op"]), text(f["reason"]))
            for f in float_ops
        ]
        body += table(("subgraph", "#", "op", "reason"), rows, numeric=(0, 1))
    else:
        body += "<p>No operator was left in float.</p>"
    return Section("float", "Operators left in float", body)


def target_section(target: dict[str, Any], outputs: Sequence[dict[str, Any]]) -> Section:
    """The target (SQNR, metric), whether it was reached, and the remedies that reached it."""
    goal = target["sqnr_db"]
    status = "reached" if target["reached"] else "NOT reached"
    wanted = [f"{goal:g} dB on every output"] if goal is not None else []
    if target.get("metric") is not None:
        wanted.append(f"metric {target['metric']:g}")
    body = (
        f"<p>Target {' and '.join(wanted)}: <strong>{status}</strong> (on the selection fold "
        "the search judged, and confirmed on samples no choice saw).</p>"
    )
    for sub in target["subgraphs"]:
        s = sub["subgraph"]
        names = [o["name"] for o in outputs if o["subgraph"] == s]
        if len(names) != len(sub["output_sqnr_db"]):
            names = [f"output {i}" for i in range(len(sub["output_sqnr_db"]))]
        bars = [
            Bar(name, db, f"{name}: {db_text(db)} dB", quality(db, goal))
            for name, db in zip(names, sub["output_sqnr_db"], strict=True)
        ]
        line = [Line(goal, "target", "target")] if goal is not None else []
        body += f"<h3>Subgraph {s}: outputs after the search (fitting SQNR)</h3>" + bar_chart(
            bars, "outputs", line
        )
        remedies = sub["remedies"]
        if not remedies:
            body += "<p>No remedy needed.</p>"
            continue
        shares = [
            Bar(
                r["tensor"],
                r["alone_sqnr_db"],
                f"{r['kind']} on {r['op']} {r['tensor']} ({r['place']})",
                f"kind-{r['kind']}",
            )
            for r in remedies
        ]
        body += (
            "<p>Remedies in the order the search applied them "
            '(<span class="key kind-rounding"></span>rounding, <span class="key kind-int16">'
            '</span>int16, <span class="key kind-float"></span>float); each bar is the output '
            "SQNR with only that place quantized before its remedy (lower: noisier place).</p>"
            + bar_chart(shares, "remedies", line)
            + table(
                ("remedy", "place", "#", "op", "tensor", "alone dB"),
                [
                    (
                        text(r["kind"]),
                        text(r["place"]),
                        "" if r["op_index"] is None else str(r["op_index"]),
                        text(r["op"]),
                        f"<code>{text(r['tensor'])}</code>",
                        db_text(r["alone_sqnr_db"]),
                    )
                    for r in remedies
                ],
                numeric=(2, 5),
            )
        )
    return Section("target", "Target SQNR", body)


def places_section(analysis: dict[str, Any]) -> Section:
    """The most damaging places of an analysis, with what each remedy does to them."""
    body = (
        "<p>Output SQNR (worst output) with only one place quantized "
        '(<span class="key place-activation"></span>an activation, <span class="key '
        'place-weights"></span>a layer\'s weights, <span class="key place-calls"></span>the '
        "subgraphs a control-flow op runs), simulated on the "
        f"{text(analysis['samples_from'])}; diamonds: the same with a remedy applied (hover "
        "for which). Float makes a place exact. The recommended remedy is the cheapest that "
        "comes close to the best.</p>"
    )
    for sub in analysis["subgraphs"]:
        places = sub["places"][:PLACES_SHOWN]
        worst = min((v for v in sub["output_sqnr_db"].values() if v is not None), default=None)
        bars = [
            Bar(
                p["tensor"],
                p["alone_worst_db"],
                f"{p['place']} of {p['op']} {p['tensor']}: {db_text(p['alone_worst_db'])} dB",
                f"place-{p['place']}",
                [
                    Mark(r["alone_worst_db"], f"{r['remedy']}: {db_text(r['alone_worst_db'])} dB")
                    for r in p["remedies"]
                    if r["alone_worst_db"] is not None
                ],
            )
            for p in places
        ]
        lines = [Line(worst, "whole model")] if worst is not None else []
        rows = [
            (
                text(p["place"]),
                text(p["op"]),
                f"<code>{text(p['tensor'])}</code>",
                db_text(p["alone_worst_db"]),
                "" if p["layer_sqnr_db"] is None else db_text(p["layer_sqnr_db"]),
                text(p["recommended"] or "-"),
                text(
                    ", ".join(
                        f"{r['remedy']} {db_text(r['alone_worst_db'])}" for r in p["remedies"]
                    )
                ),
            )
            for p in places
        ]
        body += (
            f"<h3>Subgraph {sub['subgraph']}: the {len(places)} most damaging places</h3>"
            + bar_chart(bars, "most damaging places", lines)
            + table(
                ("place", "op", "tensor", "alone dB", "layer dB", "recommended", "remedies (dB)"),
                rows,
                numeric=(3, 4),
            )
        )
    return Section("places", "Where the error comes from", body)
