"""A click group whose commands are imported only when they run.

`qtool --help` lists every command from a one-line summary kept here, without importing any of
them (and so none of numpy, the model codec or the kernels); `qtool check` imports the check
command alone.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass

import click


@dataclass(frozen=True)
class LazyCommand:
    target: str  # "package.module:attribute" of the click command
    summary: str  # the line `qtool --help` shows


class LazyGroup(click.Group):
    def __init__(
        self,
        *args: object,
        lazy_commands: Mapping[str, LazyCommand] | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = self.lazy_commands.get(cmd_name)
        if cmd_name not in self.commands and lazy is not None:
            module, attribute = lazy.target.split(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            lazy = self.lazy_commands.get(name)
            if lazy is not None:
                rows.append((name, lazy.summary))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str()))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
