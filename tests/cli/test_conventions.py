"""Project conventions: licence, one version, extras, the pre-commit hook, shell completion, and
the documentation's CI recipes (they must run the options qtool has and upload the file it
writes)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import click
import pytest
import yaml
from identify import identify
from pre_commit.clientlib import load_manifest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: qtool depends on tomli there
    import tomli as tomllib

import qtool
from qtool.cli import main
from tests.check.helpers import TF_INT8
from tests.conftest import MODELS, ROOT
from tests.docs.pages import PAGES

# README.md and the pages of docs/, where the completion, CI and configuration recipes live.
DOCS = "\n".join(page.read_text() for page in PAGES)


# The console script pip installed (shell completion keys on its name).
QTOOL_SCRIPT = Path(sys.executable).parent / "qtool"


def qtool_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(QTOOL_SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_licence_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n")
    assert "Version 2.0, January 2004" in text
    assert text.count("TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION") == 1
    assert "END OF TERMS AND CONDITIONS" in text
    assert metadata.metadata("qtool")["License-Expression"] == "Apache-2.0"


def test_version_is_written_once() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert metadata.version("qtool") == qtool.__version__
    result = qtool_cli("--version")
    assert result.stdout.strip() == f"qtool, version {qtool.__version__}"


def test_litert_extra() -> None:
    requires = metadata.requires("qtool") or []
    assert any(r.startswith("ai-edge-litert") and 'extra == "litert"' in r for r in requires), (
        requires
    )


def test_pre_commit_hook(tmp_path) -> None:
    (hook,) = load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))  # pre-commit's own schema
    assert hook["id"] == "qtool-check" and hook["language"] == "python"
    files = re.compile(hook["files"])
    assert files.search("models/net_int8.tflite") and not files.search("net.tflite.json")
    clean, broken = TF_INT8 / "cnn_int8.tflite", MODELS / "mlp.tflite"
    assert set(hook["types"]) <= identify.tags_from_path(str(clean))
    # What pre-commit runs: the entry, the hook's args, then the staged file names; the
    # README's configuration gives its own args, which replace the hook's.
    readme_args = _readme_yaml(".pre-commit-config.yaml")["repos"][0]["hooks"][0]["args"]
    for args in (hook["args"], readme_args):
        assert args[-1] == "--", args  # file names are never read as options
        command = [*shlex.split(hook["entry"]), *args]
        assert command[0] == "qtool"
        assert qtool_cli(*command[1:], str(clean)).returncode == 0
        failing = qtool_cli(*command[1:], str(clean), str(broken))
        assert failing.returncode == 1 and f"{broken}: 1 error" in failing.stdout


def test_shell_completion() -> None:
    script = qtool_cli(env={"_QTOOL_COMPLETE": "bash_source"})
    assert "complete " in script.stdout and "_QTOOL_COMPLETE=bash_complete" in script.stdout
    assert "_QTOOL_COMPLETE=bash_source qtool" in DOCS

    def complete(line: str) -> list[str]:
        words = line.split(" ")
        env = {
            "_QTOOL_COMPLETE": "bash_complete",
            "COMP_WORDS": line,
            "COMP_CWORD": str(len(words) - 1),
        }
        return [entry.split(",", 1)[1] for entry in qtool_cli(env=env).stdout.splitlines()]

    assert complete("qtool ch") == ["check"]
    assert complete("qtool check --fail") == ["--fail-on"]
    assert complete("qtool check --fail-on w") == ["warning"]


def _readme_yaml(marker: str) -> dict:
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS, re.DOTALL)
    (block,) = [b for b in blocks if marker in b]
    return yaml.safe_load(block)


def _qtool_args(command: str) -> list[str]:
    args = shlex.split(command)
    assert args[:2] == ["qtool", "check"]
    # `--` before the models: a file named like an option stays a file name.
    assert args[-2] == "--", command
    # The options parse as qtool's own (a glob stands for the models).
    main.get_command(click.Context(main), "check").make_context("check", args[2:])
    return args[2:]


def _output_of(args: list[str]) -> str:
    return args[args.index("-o") + 1]


@pytest.mark.parametrize("ci", ["github", "gitlab"])
def test_readme_ci_recipes(ci) -> None:
    if ci == "github":
        steps = _readme_yaml(".github/workflows")["jobs"]["audit"]["steps"]
        (command,) = [s["run"] for s in steps if "qtool check" in s.get("run", "")]
        args = _qtool_args(command)
        (upload,) = [
            s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif")
        ]
        assert args[args.index("--format") + 1] == "sarif"
        assert upload["with"]["sarif_file"] == _output_of(args)
        assert upload["if"] == "always()"
    else:
        job = _readme_yaml(".gitlab-ci.yml")["audit-models"]
        (command,) = [line for line in job["script"] if "qtool check" in line]
        args = _qtool_args(command)
        assert args[args.index("--format") + 1] == "junit"
        assert job["artifacts"]["reports"]["junit"] == _output_of(args)
        assert job["artifacts"]["when"] == "always"


def test_readme_config_example_is_valid(tmp_path) -> None:
    from qtool.cli.config import command_defaults

    (block,) = [b for b in re.findall(r"```toml\n(.*?)```", DOCS, re.DOTALL) if "tool.qtool" in b]
    sections = tomllib.loads(block)["tool"]["qtool"]
    assert set(sections) == {"check", "quantize"}
    ctx = click.Context(main)
    for name, table in sections.items():
        command = main.get_command(ctx, name)
        defaults = command_defaults(ctx, command, table, f"docs [tool.qtool.{name}]", tmp_path)
        # The values go through the options' own types, as they do when qtool runs.
        parsed = command.make_context(name, ["model.tflite"], default_map=defaults).params
        for key, value in table.items():
            param = next(p for p in command.params if f"--{key}" in getattr(p, "opts", ()))
            expected = tuple(value) if isinstance(value, list) else value
            if isinstance(param.type, click.Path):
                expected = str(tmp_path / value)
            assert parsed[param.name] == expected, key
