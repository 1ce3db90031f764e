"""Default options from `[tool.qtool.COMMAND]` in pyproject.toml, as ruff or pytest read theirs.

The file is the nearest pyproject.toml with a `[tool.qtool]` table, from the current directory
up. Keys are the command's long option names (`fail-on = "warning"`, `per-tensor-fc = true`,
`ignore = [...]`, a list, for a repeatable option); flags on the command line override them.
Relative paths given to path options are relative to the pyproject.toml that holds them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from qtool.errors import UsageError

CONFIG_FILE = "pyproject.toml"


def find_config(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The nearest pyproject.toml at or above `start` with a [tool.qtool] table, and that table."""
    for folder in (start, *start.parents):
        candidate = folder / CONFIG_FILE
        try:
            text = candidate.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{candidate}: cannot read: {exc}") from None
        if "qtool" not in text:
            continue  # most projects' files: no need to parse them
        table = _parse_toml(candidate, text).get("tool", {})
        if "qtool" in table:
            return candidate, table["qtool"]
    return None


def _parse_toml(path: Path, text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None


def command_defaults(
    ctx: click.Context, command: click.Command, table: Any, where: str, folder: Path
) -> dict[str, Any]:
    """`table` (a [tool.qtool.COMMAND] table) as click's default_map for `command`."""
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table of {command.name} options")
    options = {
        opt.lstrip("-"): param
        for param in command.params
        if isinstance(param, click.Option)
        for opt in param.opts
        if opt.startswith("--")
    }
    defaults: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(command, click.Group) and isinstance(value, dict):
            sub = command.get_command(ctx, key)
            if sub is not None:
                defaults[key] = command_defaults(ctx, sub, value, f"{where}.{key}", folder)
                continue
        param = options.get(key.replace("_", "-"))
        if param is None:
            known = ", ".join(sorted(options))
            raise UsageError(f"{where}: unknown option {key!r} (options: {known})")
        defaults[param.name] = _resolve_paths(param, value, folder)
    return defaults


def _resolve_paths(param: click.Option, value: Any, folder: Path) -> Any:
    if not isinstance(param.type, click.Path):
        return value
    if isinstance(value, list):
        return [str(folder / item) for item in value]
    return str(folder / value) if isinstance(value, str) else value


def load_defaults(ctx: click.Context, group: click.Group) -> dict[str, Any] | None:
    """The default_map for the command being invoked under `group`, from pyproject.toml."""
    found = find_config(Path.cwd())
    name = ctx.invoked_subcommand
    if found is None or name is None:
        return None
    path, config = found
    if not isinstance(config, dict):
        raise UsageError(f"{path}: [tool.qtool] must be a table")
    unknown = set(config) - set(group.list_commands(ctx))
    if unknown:
        raise UsageError(f"{path}: [tool.qtool] has no command {sorted(unknown)[0]!r}")
    command = group.get_command(ctx, name)
    if name not in config or command is None:
        return None
    where = f"{path} [tool.qtool.{name}]"
    return {name: command_defaults(ctx, command, config[name], where, path.parent)}
