"""The ``qtool`` command line: a thin layer over the library.

Each command lives in its own module and only parses options, calls the library and renders.
Errors a user can cause arrive as QtoolError and become one line on stderr with exit code 2.
"""

from __future__ import annotations

import sys

import click

from qtool import __version__
from qtool.errors import QtoolError


class QtoolGroup(click.Group):
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


@click.group(cls=QtoolGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="qtool")
def main() -> None:
    """Quantize float TFLite models to the int8 spec, and audit quantized models."""


def _register() -> None:
    from qtool.cli import array, check, inspect, quantize

    main.add_command(inspect.inspect_command)
    main.add_command(array.array_group)
    main.add_command(quantize.quantize_command)
    main.add_command(check.check_command)


_register()
