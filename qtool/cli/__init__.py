"""The ``qtool`` command line: a thin layer over the library.

Each command lives in its own module and only parses options, calls the library and renders.
Errors a user can cause arrive as QtoolError and become one line on stderr with exit code 2;
`guard.py` turns every other way a command can end into an exit code and at most one line.
"""

from __future__ import annotations

import click

from qtool import __version__
from qtool.cli.guard import debug_requested, run_guarded


class QtoolGroup(click.Group):
    """Runs every command inside the guard: signals, warnings and errors as one line."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        return run_guarded(
            lambda: super(QtoolGroup, self).invoke(ctx),
            debug=lambda: bool(ctx.params.get("debug")) or debug_requested(),
        )


@click.group(cls=QtoolGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="qtool")
@click.option(
    "--debug",
    is_flag=True,
    help="Show the traceback of an error (also QTOOL_DEBUG=1), e.g. of your --data generator.",
)
def main(debug: bool) -> None:
    """Quantize float TFLite models to the int8 spec, and audit quantized models."""


def _register() -> None:
    from qtool.cli import array, check, inspect, quantize

    main.add_command(inspect.inspect_command)
    main.add_command(array.array_group)
    main.add_command(quantize.quantize_command)
    main.add_command(check.check_command)


_register()
