"""The documentation as the tests read it: README.md and docs/*.md, their sections (each with the
`qtool` command it is about), the option names they mention, their links and heading anchors."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*```")
HEADING = re.compile(r"^(#{1,6}) +(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"`([^`]+)`")
# `qtool` as a program name (not `qtool/...`, `qtool.quantize`, `qtool_x` or the `qtool:` of its
# messages), with the words after it that may name a command and a subcommand.
MENTION = re.compile(r"(?<![\w/.-])qtool(?![\w/.:\[-])((?:[ \t]+[a-z]+){0,2})")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# Programs other than qtool whose options the docs show (`python -m tests.fuzz --mutants N`).
FOREIGN = {"python", "python3", "pip", "make", "pytest", "ruff", "git", "vela", "pre-commit"}

Command = tuple[str, ...]  # () is `qtool` itself, ("array", "quantize") a subcommand


@dataclass(frozen=True)
class Section:
    """The text under one heading, up to the next heading of any level."""

    page: Path
    line: int  # of the heading (0: the text before the first heading)
    heading: str
    level: int
    command: Command | None  # its own heading's, else the nearest enclosing heading's
    body: list[tuple[int, str]]  # (line number, line)


@dataclass(frozen=True)
class OptionUse:
    """An `--option` the docs name, and the command it is named for (None: none in particular)."""

    page: Path
    line: int
    option: str
    command: Command | None
    section: Section


def command_in(text: str, commands: dict[str, set[str]]) -> Command | None:
    """The command the first `qtool ...` of `text` names, or None without one. `commands` maps
    each command path (space-joined; "" for qtool itself) to its subcommand names."""
    match = MENTION.search(text)
    return None if match is None else _resolve(match.group(1).split(), commands)


def _resolve(words: list[str], commands: dict[str, set[str]]) -> Command:
    path: Command = ()
    for word in words:
        if word not in commands.get(" ".join(path), set()):
            break
        path = (*path, word)
    return path


def sections(page: Path, commands: dict[str, set[str]]) -> list[Section]:
    """The sections of `page`, each with the command it is about."""
    found: list[Section] = []
    stack: list[tuple[int, Command | None]] = []  # enclosing headings: (level, own command)
    current = Section(page, 0, "", 0, None, [])
    fenced = False
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else HEADING.match(line)
        if heading is None:
            current.body.append((number, line))
            continue
        found.append(current)
        level, title = len(heading.group(1)), heading.group(2)
        while stack and stack[-1][0] >= level:
            stack.pop()
        # A heading is about a command when a code span of it names one: "## `qtool check`".
        spans = (command_in(span, commands) for span in INLINE_CODE.findall(title))
        own = next((command for command in spans if command is not None), None)
        stack.append((level, own))
        inherited = next((c for _, c in reversed(stack) if c is not None), None)
        current = Section(page, number, title, level, inherited, [])
    found.append(current)
    return found


def _units(section: Section) -> Iterator[tuple[int, str]]:
    """The pieces of a section an option is read in: each line of a code block (a trailing `\\`
    continues it), each inline code span, and each line of prose without its code spans."""
    fenced, pending, start = False, "", 0
    prose: list[tuple[int, str]] = []
    for number, line in section.body:
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            prose.append((number, line))
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""
    if not prose:
        return
    text = "\n".join(line for _, line in prose)
    numbers = [number for number, _ in prose]
    for span in INLINE_CODE.finditer(text):
        yield numbers[text.count("\n", 0, span.start())], span.group(1).replace("\n", " ")
    outside = INLINE_CODE.sub(lambda span: "\n" * span.group(0).count("\n"), text)
    yield from zip(numbers, outside.split("\n"), strict=True)


def option_uses(commands: dict[str, set[str]]) -> Iterator[OptionUse]:
    """Every `--option` of the docs, with the command it is named for: the one a `qtool ...`
    before it in the same unit names, else the section's; none after another program's name."""
    for page in PAGES:
        for section in sections(page, commands):
            for line, unit in _units(section):
                words = unit.removeprefix("$ ").split()
                foreign = bool(words) and words[0] in FOREIGN
                mentions = list(MENTION.finditer(unit))
                for option in OPTION.finditer(unit):
                    before = [m for m in mentions if m.end() <= option.start()]
                    if before:
                        command = _resolve(before[-1].group(1).split(), commands)
                    elif foreign:
                        continue
                    else:
                        command = section.command
                    yield OptionUse(page, line, option.group(0), command, section)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (a repeated heading gets -1, -2...)."""
    seen: dict[str, int] = {}
    found = set()
    for section in sections(page, {}):
        if not section.heading:
            continue
        base = slug(section.heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found
