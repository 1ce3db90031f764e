"""The ``qtool`` command line: a thin layer over the library.

Each command lives in its own module and only parses options, calls the library and renders.
Errors a user can cause arrive as QtoolError and become one line on stderr with exit code 2;
`guard.py` turns every other way a command can end into an exit code and at most one line.
"""

from __future__ import annotations

import click

from qtool.cli.config import DEBUG, DEBUG_HELP, ISOLATED_HELP, add_run_options
from qtool.cli.guard import debug_requested, run_guarded
from qtool.cli.lazy import LazyCommand, LazyGroup
from qtool.version import __version__

# Commands are imported when they run; `qtool --help` shows these summaries without importing.
COMMANDS = {
    "analyze": LazyCommand(
        "qtool.cli.analyze:analyze_command", "Where MODEL's quantization error comes from."
    ),
    "calibrate": LazyCommand(
        "qtool.cli.calibrate:calibrate_command", "Calibration statistics of MODEL, to merge."
    ),
    "array": LazyCommand("qtool.cli.array:array_group", "Quantize and dequantize .npy arrays."),
    "check": LazyCommand("qtool.cli.check:check_command", "Audit MODEL... against the int8 spec."),
    "inspect": LazyCommand("qtool.cli.inspect:inspect_command", "Show what is in a model."),
    "quantize": LazyCommand(
        "qtool.cli.quantize:quantize_command", "Quantize a float MODEL to int8."
    ),
}


class QtoolGroup(LazyGroup):
    """Runs every command inside the guard: signals, warnings and errors as one line."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        return run_guarded(
            lambda: super(QtoolGroup, self).invoke(ctx),
            debug=lambda: bool(ctx.params.get("debug") or ctx.meta.get(DEBUG)) or debug_requested(),
            flags=lambda: self._flags(ctx),
        )

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Every command also takes --isolated and --debug after its name."""
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            add_run_options(command)
        return command

    def _flags(self, ctx: click.Context) -> dict[str, str]:
        """The running command's parameter names and the options that set them (the longest
        spelling: --output, not -o)."""
        name = ctx.invoked_subcommand
        command = self.get_command(ctx, name) if name else None
        return option_flags(command) if command is not None else {}


@click.group(
    cls=QtoolGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="qtool")
@click.option("--debug", is_flag=True, help=DEBUG_HELP)
@click.option("--isolated", is_flag=True, help=ISOLATED_HELP)
def main(debug: bool, isolated: bool) -> None:
    """Quantize float TFLite models to the int8 spec, and audit quantized models.

    Default options come from [tool.qtool.COMMAND] in the project's pyproject.toml (named on
    stderr when they apply; never a file above the git work tree or the home folder).
    """


def option_flags(command: click.Command) -> dict[str, str]:
    """Parameter name -> option of a command (and of a group's subcommands)."""
    flags = {
        param.name: max(param.opts, key=len)
        for param in command.params
        if isinstance(param, click.Option) and param.name
    }
    for sub in getattr(command, "commands", {}).values():
        flags.update(option_flags(sub))
    return flags
