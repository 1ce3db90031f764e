"""The text report: a rich table per model on a terminal, one whole line per finding elsewhere.

Logs and files get plain lines (`PATH: WHERE: SEVERITY RULE: MESSAGE`) that are never cut or
wrapped, with control characters escaped, so every name is whole and two different models or
tensors never print the same.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from qtool.check.findings import Finding, ModelResult
from qtool.check.rules import RULES
from qtool.display import printable

_STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def location(finding: Finding) -> str:
    """Where a finding is: "model", "subgraph 1", or "subgraph 0 op 3 CONV_2D"."""
    if finding.subgraph is None:
        return "model"
    if finding.op_index is None:
        return f"subgraph {finding.subgraph}"
    return f"subgraph {finding.subgraph} op {finding.op_index} {finding.op}"


def summary_line(result: ModelResult) -> str:
    """A model's finding counts in one line, or why it could not be read."""
    if result.error is not None:
        # Load errors already name the file; do not repeat it.
        return f"{result.path}: cannot read: {result.error.removeprefix(result.path + ': ')}"
    counts = result.summary
    suppressed = f", {len(result.suppressed)} suppressed" if result.suppressed else ""
    return (
        f"{result.path}: {counts['errors']} error{'s' * (counts['errors'] != 1)}, "
        f"{counts['warnings']} warning{'s' * (counts['warnings'] != 1)}, "
        f"{counts['infos']} info{suppressed}"
    )


def target_line(target: dict[str, Any]) -> str:
    """A target placement summary (`TargetReport.summary`) in one line."""
    from qtool.targets.placement import macs_text  # only with --target (start-up budget)

    macs = macs_text(target["mac_share"], target["macs"], target["compiled"])
    return (
        f"target {target['target']}: {target['on_target']} of {target['ops']} ops ({macs}) run "
        f"on the {target['accelerator']}, {target['fallback']} fall back to the CPU, "
        f"{target['cannot_run']} cannot run"
    )


def accuracy_line(accuracy: dict[str, Any]) -> str:
    """An accuracy comparison in one line: the worst output SQNR against the threshold, and how
    the quantized model ran."""
    found = [o["fitting_sqnr_db"] for o in accuracy["outputs"]]
    worst = min((float("inf") if v is None else v for v in found), default=float("inf"))
    metric = "" if accuracy.get("metric") is None else f", metric {accuracy['metric']:.6g}"
    if metric and accuracy.get("min_metric") is not None:
        metric += f" (min-metric {accuracy['min_metric']:g})"
    return (
        f"accuracy: worst output SQNR {worst:.2f} dB (min-sqnr {accuracy['min_sqnr']:g}){metric} "
        f"over {accuracy['samples']} samples, quantized model "
        f"{'run in LiteRT' if accuracy['engine'] == 'litert' else 'simulated'}"
    )


def weights_line(weights: dict[str, dict[str, int]]) -> str:
    """How a model stores narrow weights, in one line: "weights: hybrid 3 int8 per-axis;
    float16 12 float16"."""
    parts = [
        f"{how} " + ", ".join(f"{count} {form}" for form, count in sorted(forms.items()))
        for how, forms in weights.items()
    ]
    return "weights: " + "; ".join(parts)


def extra_lines(result: ModelResult) -> list[str]:
    """How the model stores narrow weights, and the target and accuracy summaries when they
    were asked for."""
    lines = [] if result.weights is None else [weights_line(result.weights)]
    if result.target is not None:
        lines.append(target_line(result.target))
    if result.accuracy is not None:
        lines.append(accuracy_line(result.accuracy))
    return lines


def finding_line(path: str, finding: Finding) -> str:
    """One finding as a compiler-style diagnostic line (the message names the operand)."""
    return printable(
        f"{path}: {location(finding)}: {finding.severity} {finding.rule}: {finding.message}"
    )


def _findings_table(result: ModelResult) -> Table:
    # Text cells throughout, escaped: paths, tensor and custom op names may hold "[...]",
    # which is not markup, and control characters, which must not reach the terminal.
    table = Table(title=Text(printable(result.path)), title_justify="left", expand=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("rule", no_wrap=True)
    table.add_column("where", ratio=1, overflow="fold")
    table.add_column("message", ratio=3, overflow="fold")
    for finding in result.findings:
        table.add_row(
            Text(finding.severity, style=_STYLES[finding.severity]),
            Text(finding.rule),
            Text(printable(location(finding))),
            Text(printable(finding.message)),
        )
    return table


def render_text(results: Sequence[ModelResult], console: Console, quiet: bool = False) -> None:
    """Each model's findings (unless `quiet`) and its summary line: a table on a terminal,
    whole plain lines otherwise."""
    for result in results:
        if result.findings and not quiet:
            if console.is_terminal:
                console.print(_findings_table(result))
            else:
                for finding in result.findings:
                    console.out(finding_line(result.path, finding), highlight=False)
        style = (
            "bold red"
            if result.error or result.summary["errors"]
            else ("yellow" if result.summary["warnings"] else "green")
        )
        console.print(Text(printable(summary_line(result)), style=style), soft_wrap=True)
        for line in extra_lines(result):
            console.print(Text(f"  {printable(line)}"), soft_wrap=True)


def to_text(results: Sequence[ModelResult], quiet: bool = False) -> str:
    """The text report as plain lines, e.g. for a file."""
    buffer = io.StringIO()
    render_text(results, Console(file=buffer, color_system=None, highlight=False), quiet=quiet)
    return buffer.getvalue()


def render_rules(console: Console) -> None:
    """The rule catalogue: id, default severity, what it checks and why it matters."""
    if not console.is_terminal:
        for rule in RULES.values():
            device = f" On a device: {rule.on_device}" if rule.on_device else ""
            console.out(f"{rule.id} ({rule.severity}): {rule.title}. {rule.help}{device}")
        return
    table = Table(title="qtool check rules", title_justify="left", show_lines=True)
    for column in ("rule", "severity", "checks"):
        table.add_column(column, overflow="fold")
    for rule in RULES.values():
        text = Text(rule.title + "\n")
        text.append(rule.help, style="dim")
        if rule.on_device:
            text.append(f"\nOn a device: {rule.on_device}", style="italic")
        table.add_row(rule.id, rule.severity, text)
    console.print(table)
