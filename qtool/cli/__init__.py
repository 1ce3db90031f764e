"""The ``qtool`` command line: a thin layer over the library.

Each command lives in its own module and only parses options, calls the library and renders.
Errors a user can cause arrive as QtoolError and become one line on stderr with exit code 2.
"""

from __future__ import annotations

import sys

import click

from qtool import __version__
from qtool.cli.config import load_defaults
from qtool.cli.lazy import LazyCommand, LazyGroup
from qtool.errors import QtoolError

# Commands are imported when they run; `qtool --help` shows these summaries without importing.
COMMANDS = {
    "analyze": LazyCommand(
        "qtool.cli.analyze:analyze_command", "Where MODEL's quantization error comes from."
    ),
    "array": LazyCommand("qtool.cli.array:array_group", "Quantize and dequantize .npy arrays."),
    "check": LazyCommand("qtool.cli.check:check_command", "Audit MODEL... against the int8 spec."),
    "inspect": LazyCommand("qtool.cli.inspect:inspect_command", "Show what is in a model."),
    "quantize": LazyCommand(
        "qtool.cli.quantize:quantize_command", "Quantize a float MODEL to int8."
    ),
}


class QtoolGroup(LazyGroup):
    """Turns library errors into ``qtool: error: ...`` and an exit code, never a traceback."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except QtoolError as exc:
            click.echo(f"qtool: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx is not None else "qtool"
            click.echo(f"qtool: error: {exc.format_message()} (see {command} --help)", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("qtool: interrupted", err=True)
            sys.exit(130)


@click.group(
    cls=QtoolGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="qtool")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Quantize float TFLite models to the int8 spec, and audit quantized models.

    Default options come from [tool.qtool.COMMAND] in the nearest pyproject.toml.
    """
    ctx.default_map = load_defaults(ctx, main)
