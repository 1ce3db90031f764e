"""Shared output of the commands: rich tables on a terminal, whole plain lines elsewhere.

CI logs and pipes get no table borders, no colour and nothing cut or wrapped: every name is
printed whole (control characters escaped), so two different names never look the same.

Names come from models and file names, so they are data, never instructions: the consoles read
no rich markup and no emoji codes in anything (`[link=...]`, `[/]` print as they are), every
cell and title is escaped with `printable`, and whatever text still reaches the terminal has its
control characters escaped on the way out (only rich's own styles and cursor moves pass).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from qtool.display import printable, printable_lines


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich would exit 1 here, which `check` means as "findings": the guard ends the run
        # as SIGPIPE would instead, like output written any other way.
        raise BrokenPipeError

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        # The last line of defence: text segments (not rich's own control segments) lose their
        # control characters, whatever path a name took to get here.
        return super()._render_buffer(
            segment if segment.control else Segment(printable_lines(segment.text), segment.style)
            for segment in buffer
        )


stdout = _Console(highlight=False, markup=False, emoji=False)
stderr = _Console(stderr=True, highlight=False, markup=False, emoji=False)

Cell = str | Text  # a str is shown as it is (never read as markup)

PROGRESS_INTERVAL = 5.0  # seconds between progress lines when no terminal is attached


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no rich markup), so pipelines can parse it."""
    print(json.dumps(data, indent=2, sort_keys=False))


def _plain(cell: Cell) -> str:
    return printable(cell.plain if isinstance(cell, Text) else cell)


def _rich(cell: Cell) -> Text:
    return cell if isinstance(cell, Text) else Text(printable(cell))


def print_fields(console: Console, rows: Sequence[tuple[str, Cell]]) -> None:
    """Label/value pairs: an aligned grid on a terminal, `label: value` lines elsewhere."""
    if not console.is_terminal:
        for label, value in rows:
            console.out(f"{label}: {_plain(value)}", highlight=False)
        return
    grid = Table.grid(padding=(0, 2))
    for label, value in rows:
        grid.add_row(Text(label, style="bold"), _rich(value))
    console.print(grid)


def print_table(
    console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[Cell]]
) -> None:
    """A table on a terminal (long cells fold onto more lines, never cut); elsewhere the title
    and one whole line per row, columns aligned."""
    if not console.is_terminal:
        console.out(f"{printable(title)}:", highlight=False)
        cells = [list(columns)] + [[_plain(cell) for cell in row] for row in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        for row in cells:
            line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            console.out("  " + line.rstrip(), highlight=False)
        return
    table = Table(title=Text(printable(title)), title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(_rich(cell) for cell in row))
    console.print(table)


class PlainProgress:
    """Progress for logs: a line on the console every `interval` seconds, and a last one."""

    def __init__(
        self,
        console: Console,
        what: str,
        interval: float = PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console, self.what, self.interval, self.clock = console, what, interval, clock
        self.start = self.last = clock()
        self.done = 0
        self.total: int | None = None

    def set_total(self, total: int | None) -> None:
        self.total = total

    def advance(self, count: int) -> None:
        self.done += count
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self.console.out(f"{self.what}: {self._status(now)}", highlight=False)

    def finish(self) -> None:
        self.console.out(
            f"{self.what}: done, {self._status(self.clock(), finished=True)}", highlight=False
        )

    def _status(self, now: float, finished: bool = False) -> str:
        elapsed = now - self.start
        of = f"/{self.total}" if self.total else ""
        rate = f", {self.done / elapsed:.1f}/s" if elapsed > 0 else ""
        eta = ""
        if self.total and self.done and elapsed > 0 and not finished:
            # What is left at the rate so far: a calibration's rate is steady after the first
            # chunk (the engine's set-up counts in it, which the estimate then overstates).
            left = max(0, self.total - self.done) * elapsed / self.done
            eta = f", about {left:.0f} s left"
        return f"{self.done}{of} samples{rate}, {elapsed:.1f} s{eta}"


@contextlib.contextmanager
def progress(
    console: Console, what: str, enabled: bool
) -> Iterator[tuple[Callable[[int], None], Callable[[int | None], None]]]:
    """(advance, set_total) callbacks showing progress: a live bar on a terminal, a line every
    few seconds in a log, nothing when not `enabled`."""
    if not enabled:
        yield (lambda count: None), (lambda total: None)
        return
    if not console.is_terminal:
        plain = PlainProgress(console, what)
        yield plain.advance, plain.set_total
        plain.finish()
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(what, total=None, rate="")

        def advance(count: int) -> None:
            bar.advance(task, count)
            elapsed = bar.tasks[task].elapsed or 0
            if elapsed:
                bar.update(task, rate=f"{bar.tasks[task].completed / elapsed:.0f} samples/s")

        yield advance, lambda total: bar.update(task, total=total)
