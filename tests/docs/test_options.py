"""Help and docs agree: every option of every command's --help is documented in a section about
that command (README.md or docs/, under a heading naming `qtool COMMAND`), and every option the
docs name for a command is one it has. New options fail here until they are documented."""

from __future__ import annotations

import click
import pytest

import qtool
from qtool.cli import main
from qtool.quantize import QuantizeOptions
from tests.conftest import ROOT
from tests.docs.pages import Command, OptionUse, option_uses


def command_tree() -> dict[Command, click.Command]:
    """Every command and group of `qtool`, by path: () is `qtool` itself."""
    tree: dict[Command, click.Command] = {(): main}

    def walk(path: Command, group: click.Group, ctx: click.Context) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, name
            tree[(*path, name)] = command
            if isinstance(command, click.Group):
                walk((*path, name), command, click.Context(command, info_name=name, parent=ctx))

    walk((), main, click.Context(main, info_name="qtool"))
    return tree


TREE = command_tree()
SUBCOMMANDS = {
    " ".join(path): set(command.commands) if isinstance(command, click.Group) else set()
    for path, command in TREE.items()
}
USES = list(option_uses(SUBCOMMANDS))


def options(path: Command) -> dict[str, click.Option]:
    """The long option names of a command (both sides of --flag/--no-flag), --help included."""
    command = TREE[path]
    ctx = click.Context(command, info_name=path[-1] if path else "qtool")
    return {
        name: param
        for param in command.get_params(ctx)
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
        if name.startswith("--")
    }


def shown(path: Command) -> str:
    return " ".join(("qtool", *path))


def test_the_docs_are_read() -> None:
    """The parser finds what the pages hold: sections of every command, and options in them."""
    commands = {use.section.command for use in USES}
    assert {path for path, c in TREE.items() if not isinstance(c, click.Group)} <= commands
    assert len(USES) > 200


# The options every command takes from the group (qtool.cli.config.add_run_options): documented
# once, under `qtool`'s global options.
RUN_OPTIONS = frozenset({"--isolated", "--debug"})


@pytest.mark.parametrize("path", sorted(TREE), ids=shown)
def test_every_option_is_documented(path: Command) -> None:
    documented = {use.option for use in USES if use.command == path == use.section.command}
    if path:
        documented |= RUN_OPTIONS & {
            use.option for use in USES if use.command == () == use.section.command
        }
    missing = [
        name
        for name, param in options(path).items()
        if not param.hidden and "--help" not in param.opts and name not in documented
    ]
    assert not missing, (
        f"{shown(path)}: {', '.join(missing)} not documented: name each in a section about "
        f"`{shown(path)}` (under a heading naming it) in README.md or docs/"
    )


def _where(use: OptionUse) -> str:
    return f"{use.page.relative_to(ROOT)}:{use.line}"


def test_every_documented_option_exists() -> None:
    known = {path: options(path) for path in TREE}
    anywhere = set().union(*known.values())
    wrong = [
        f"{_where(use)}: {use.option} is not an option of `{shown(use.command)}`"
        if use.command is not None
        else f"{_where(use)}: {use.option} is not an option of any qtool command"
        for use in USES
        if use.option not in (known[use.command] if use.command is not None else anywhere)
    ]
    assert not wrong, "\n".join(wrong)


def test_python_api_is_documented() -> None:
    """Every public name of the package and every QuantizeOptions field is on the API page."""
    page = (ROOT / "docs" / "python-api.md").read_text()
    names = [name for name in qtool.__all__ if name != "__version__"]
    assert [
        name for name in names if f"`qtool.{name}" not in page and f"`{name}`" not in page
    ] == []
    fields = QuantizeOptions.__dataclass_fields__
    assert [name for name in fields if f"`{name}`" not in page] == []
