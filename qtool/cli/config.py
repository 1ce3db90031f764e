"""Default options from `[tool.qtool.COMMAND]` in the current project's pyproject.toml.

`qtool check` runs in repositories other people wrote, so their settings must never turn it
against the user who runs it:
- The file is the nearest pyproject.toml from the current directory up (the project's: one
  without a [tool.qtool] table means no settings), never looked for above the enclosing git work
  tree (a folder holding `.git`), the user's home, or a folder anyone may write to (/tmp); a file
  anyone may write is not read either.
- Whenever settings apply, stderr says so: `qtool: settings from path/pyproject.toml: key, key`.
- `--isolated` (before or after the command) or QTOOL_NO_CONFIG=1 leaves the file out.
- Options that run code, read or write files by path or replace files (`data`, `reference`,
  `custom-ops`, `output`, `write-baseline`, `force`...) come from the command line only: in the
  file they are a one-line error naming the key and the file. `baseline` may name a file inside
  the project. `ignore` is allowed, and what it leaves out is recorded as suppressed in every
  report format, as `--ignore` is.

Keys are the command's long option names (`fail-on = "warning"`, `per-tensor-fc = true`, `ignore
= [...]`, a list, for a repeatable option); flags on the command line override them. Relative
paths are relative to the pyproject.toml that holds them.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import click

from qtool.display import printable
from qtool.errors import UsageError
from qtool.files import open_regular, os_reason

CONFIG_FILE = "pyproject.toml"
NO_CONFIG_VARIABLE = "QTOOL_NO_CONFIG"
MAX_CONFIG_BYTES = 1 << 20
SETTINGS_FILE = "qtool.settings_file"  # ctx.meta: the pyproject.toml whose settings apply
DEBUG = "qtool.debug"  # ctx.meta: --debug was given after the command

# Options a file may not set: they run code, name files to read or write, or let outputs replace
# files. A click.Path option is refused too unless listed in PROJECT_FILES.
COMMAND_LINE_ONLY = frozenset(
    {
        "data",
        "holdout",
        "metric",
        "statistics",
        "custom_ops",
        "reference",
        "output",
        "report_path",
        "html_path",
        "write_baseline",
        "force",
    }
)
PROJECT_FILES = frozenset({"baseline"})  # path options a file may set, to a file in its project


def config_disabled() -> bool:
    """QTOOL_NO_CONFIG set to anything but empty or 0."""
    return os.environ.get(NO_CONFIG_VARIABLE, "") not in ("", "0")


def _writable_by_anyone(path: Path) -> bool:
    try:
        return bool(os.stat(path).st_mode & stat.S_IWOTH)
    except OSError:
        return False


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, OSError):
        return None


def find_config(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The project's pyproject.toml (the nearest at or above `start`, within the bounds the
    module docstring lists) and its [tool.qtool] table, or None."""
    home = _home()
    for folder in (start, *start.parents):
        if _writable_by_anyone(folder):
            return None  # anyone could have put a pyproject.toml here or above
        candidate = folder / CONFIG_FILE
        text = _read(candidate)
        if text is not None:
            if _writable_by_anyone(candidate):
                return None
            if "qtool" not in text:
                return None  # the project's file, without qtool settings (most need no parse)
            table = _parse_toml(candidate, text).get("tool", {})
            return (candidate, table["qtool"]) if "qtool" in table else None
        if folder == home or os.path.lexists(folder / ".git"):
            return None  # the top of the user's files, or of the work tree
    return None


def _read(path: Path) -> str | None:
    """The file's text; None when there is none (anything but a regular file is an error)."""
    try:
        with open_regular(path) as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read ({os_reason(exc)})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise UsageError(f"{path}: larger than {MAX_CONFIG_BYTES:,} bytes, not read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None


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
    """`table` (a [tool.qtool.COMMAND] table) as click's default_map for `command`; options a
    file may not set are a UsageError naming the key."""
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
        _refuse_command_line_only(param, key, value, where, folder)
        defaults[param.name] = _resolve_paths(param, value, folder)
    return defaults


def _refuse_command_line_only(
    param: click.Option, key: str, value: Any, where: str, folder: Path
) -> None:
    flag = max(param.opts, key=len)
    if param.name in PROJECT_FILES:
        inside = folder.resolve()
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, str):
                continue  # the option's type says what is wrong with it
            target = Path(os.path.realpath(folder / item))
            if target != inside and inside not in target.parents:
                raise UsageError(
                    f"{where}: {key} {item!r} is outside the project; a file outside it is "
                    f"given on the command line ({flag})"
                )
        return
    if param.name in COMMAND_LINE_ONLY or isinstance(param.type, click.Path):
        raise UsageError(
            f"{where}: {key} is not read from a file (it runs code, names files or replaces "
            f"them); give {flag} on the command line"
        )


def _resolve_paths(param: click.Option, value: Any, folder: Path) -> Any:
    if not isinstance(param.type, click.Path):
        return value
    if isinstance(value, list):
        return [str(folder / item) for item in value]
    return str(folder / value) if isinstance(value, str) else value


def _shown(path: Path) -> str:
    """The path as short as it reads from the current directory."""
    try:
        return printable(os.path.relpath(path))
    except ValueError:
        return printable(str(path))


def _keys(table: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in table.items():
        keys += _keys(value, f"{prefix}{key}.") if isinstance(value, dict) else [prefix + key]
    return keys


def apply_settings(ctx: click.Context, isolated: bool) -> None:
    """Set the default_map of a command context from the project's settings, unless isolated,
    and say on stderr which file and keys apply."""
    root = ctx.find_root()
    if isolated or root.params.get("isolated") or config_disabled():
        ctx.default_map = None
        return
    if ctx.parent is not root:
        return  # a subcommand of a group (array): its group applied the settings
    found = find_config(Path.cwd())
    if found is None:
        return
    path, config = found
    if not isinstance(config, dict):
        raise UsageError(f"{path}: [tool.qtool] must be a table")
    group = root.command
    if isinstance(group, click.Group):
        unknown = set(config) - set(group.list_commands(root))
        if unknown:
            raise UsageError(f"{path}: [tool.qtool] has no command {sorted(unknown)[0]!r}")
    name = ctx.info_name or ctx.command.name or ""
    if name not in config:
        return
    where = f"{path} [tool.qtool.{name}]"
    ctx.default_map = command_defaults(ctx, ctx.command, config[name], where, path.parent)
    ctx.meta[SETTINGS_FILE] = _shown(path)
    if config[name]:
        keys = ", ".join(printable(key) for key in _keys(config[name]))
        click.echo(f"qtool: settings from {_shown(path)}: {keys}", err=True)


def _isolated(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if not ctx.resilient_parsing:
        apply_settings(ctx, value)
    return value


def _debug(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[DEBUG] = True
    return value


ISOLATED_HELP = f"Read no settings from pyproject.toml (also {NO_CONFIG_VARIABLE}=1)."
DEBUG_HELP = "Show the traceback of an error (also QTOOL_DEBUG=1), e.g. of your --data generator."


def add_run_options(command: click.Command) -> None:
    """Give a command (and a group's subcommands) --isolated and --debug, which the group takes
    before the command too. --isolated is eager: processed before any option looks up its
    default, which the project's settings provide."""
    names = {param.name for param in command.params}
    if "isolated" not in names:
        command.params.append(
            click.Option(
                ["--isolated"],
                is_flag=True,
                is_eager=True,
                expose_value=False,
                callback=_isolated,
                help=ISOLATED_HELP,
            )
        )
    if "debug" not in names:
        command.params.append(
            click.Option(
                ["--debug"], is_flag=True, expose_value=False, callback=_debug, help=DEBUG_HELP
            )
        )
    for sub in getattr(command, "commands", {}).values():
        add_run_options(sub)
