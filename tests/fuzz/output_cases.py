"""Output paths a user can get wrong: missing or unwritable places, long names, the input itself,
existing files with and without --force, special files in the way.

Each case starts from a copy of the `mlp` fixture in `<case>/in/` and its calibration data, and
gives the quantize (or check) arguments, the exit codes it may end with, the files it may write,
and an optional extra invariant (e.g. the mode an existing output keeps).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.data_cases import ACCEPTED, ANY, REFUSED

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "fixtures" / "data" / "mlp_calib.npz"

Extra = Callable[[Path], str | None]  # case dir -> what is wrong, or None


@dataclass
class Plan:
    argv: list[str]
    expect: frozenset[int]
    written: set[str] = field(default_factory=set)  # case-relative paths a success writes
    extra: Extra | None = None


@dataclass(frozen=True)
class OutputCase:
    name: str
    build: Callable[[Path, Path], Plan]  # (case dir, input model) -> plan


CASES: list[OutputCase] = []


def case(build: Callable[[Path, Path], Plan]) -> Callable[[Path, Path], Plan]:
    CASES.append(OutputCase(build.__name__, build))
    return build


def quantize(model: Path, *extra: str) -> list[str]:
    return ["quantize", str(model), "--data", str(DATA), "--quiet", *extra]


def _old_pair(d: Path, mode: int = 0o644) -> tuple[Path, Path]:
    out, report = d / "old.tflite", d / "old.report.json"
    out.write_bytes(b"previous model")
    report.write_text('{"previous": true}')
    out.chmod(mode)
    return out, report


def _mode_is(path: Path, mode: int) -> Extra:
    def check(_: Path) -> str | None:
        actual = stat.S_IMODE(path.stat().st_mode)
        return None if actual == mode else f"{path.name} has mode {actual:o}, expected {mode:o}"

    return check


@case
def out_missing_directory(d, model):
    return Plan(quantize(model, "-o", str(d / "nope" / "m.tflite")), REFUSED)


@case
def out_is_directory(d, model):
    (d / "m.tflite").mkdir()
    return Plan(quantize(model, "-o", str(d / "m.tflite"), "--force"), REFUSED)


@case
def out_name_too_long(d, model):
    return Plan(quantize(model, "-o", str(d / ("m" * 300 + ".tflite"))), REFUSED)


@case
def out_name_near_limit(d, model):
    # 255 bytes is the limit of a name, and the temporary file's name is longer still
    name = "m" * (255 - len(".tflite")) + ".tflite"
    return Plan(
        quantize(model, "-o", str(d / name), "--report", str(d / "r.json")), ANY, {name, "r.json"}
    )


@case
def out_path_too_long(d, model):
    return Plan(quantize(model, "-o", str(d / "/".join(["abcdefgh"] * 600) / "m.tflite")), REFUSED)


@case
def out_under_a_file(d, model):
    (d / "file").write_text("x")
    return Plan(quantize(model, "-o", str(d / "file" / "m.tflite")), REFUSED)


@case
def out_in_proc(d, model):
    return Plan(quantize(model, "-o", "/proc/self/qtool_m.tflite"), REFUSED)


@case
def out_empty(d, model):
    return Plan(quantize(model, "-o", ""), REFUSED)


@case
def out_nul_byte(d, model):
    return Plan(quantize(model, "-o", str(d / "a\x00b.tflite")), REFUSED)


@case
def out_trailing_slash(d, model):
    return Plan(quantize(model, "-o", str(d / "m.tflite") + "/"), REFUSED)


@case
def out_is_input(d, model):
    return Plan(quantize(model, "-o", str(model), "--force"), REFUSED)


@case
def out_link_to_input(d, model):
    (d / "link.tflite").symlink_to(model)
    return Plan(quantize(model, "-o", str(d / "link.tflite"), "--force"), REFUSED)


@case
def out_exists_without_force(d, model):
    out, _ = _old_pair(d)
    return Plan(quantize(model, "-o", str(out)), REFUSED)


@case
def out_fifo_in_the_way(d, model):
    os.mkfifo(d / "m.tflite")
    return Plan(quantize(model, "-o", str(d / "m.tflite"), "--force"), REFUSED)


@case
def out_dangling_link_in_the_way(d, model):
    (d / "m.tflite").symlink_to(d / "elsewhere.tflite")
    return Plan(
        quantize(model, "-o", str(d / "m.tflite"), "--force"),
        ANY,
        {"m.tflite", "m.report.json"},
    )


@case
def out_rich_markup_name(d, model):
    name = "[bold]m[red].tflite"
    return Plan(quantize(model, "-o", str(d / name)), ACCEPTED, {name, "[bold]m[red].report.json"})


@case
def out_not_utf8_name(d, model):
    name = os.fsdecode(b"m\xff.tflite")
    return Plan(
        quantize(model, "-o", str(d / name)), ACCEPTED, {name, os.fsdecode(b"m\xff.report.json")}
    )


@case
def out_newline_name(d, model):
    return Plan(
        quantize(model, "-o", str(d / "a\nb.tflite")), ACCEPTED, {"a\nb.tflite", "a\nb.report.json"}
    )


@case
def force_report_missing_directory(d, model):
    out, _ = _old_pair(d)
    argv = quantize(model, "-o", str(out), "--report", str(d / "nope" / "r.json"), "--force")
    return Plan(argv, REFUSED)


@case
def force_report_in_proc(d, model):
    out, _ = _old_pair(d)
    return Plan(
        quantize(model, "-o", str(out), "--report", "/proc/self/r.json", "--force"), REFUSED
    )


@case
def force_report_name_too_long(d, model):
    out, _ = _old_pair(d)
    argv = quantize(model, "-o", str(out), "--report", str(d / ("r" * 300)), "--force")
    return Plan(argv, REFUSED)


@case
def force_report_is_directory(d, model):
    out, _ = _old_pair(d)
    (d / "r.json").mkdir()
    return Plan(quantize(model, "-o", str(out), "--report", str(d / "r.json"), "--force"), REFUSED)


@case
def force_report_under_a_file(d, model):
    out, _ = _old_pair(d)
    argv = quantize(model, "-o", str(out), "--report", str(out / "r.json"), "--force")
    return Plan(argv, REFUSED)


@case
def report_same_as_output(d, model):
    return Plan(
        quantize(model, "-o", str(d / "m.tflite"), "--report", str(d / "m.tflite")), REFUSED
    )


@case
def report_is_input(d, model):
    return Plan(
        quantize(model, "-o", str(d / "m.tflite"), "--report", str(model), "--force"), REFUSED
    )


@case
def force_replaces_and_keeps_mode(d, model):
    out, _ = _old_pair(d, 0o600)
    argv = quantize(model, "-o", str(out), "--force")
    return Plan(argv, ACCEPTED, {"old.tflite", "old.report.json"}, _mode_is(out, 0o600))


@case
def force_keeps_read_only_mode(d, model):
    out, _ = _old_pair(d, 0o444)
    argv = quantize(model, "-o", str(out), "--force")
    return Plan(argv, ACCEPTED, {"old.tflite", "old.report.json"}, _mode_is(out, 0o444))


@case
def new_file_mode_follows_umask(d, model):
    umask = os.umask(0)
    os.umask(umask)
    out = d / "m.tflite"
    expected = 0o666 & ~umask
    return Plan(
        quantize(model, "-o", str(out)),
        ACCEPTED,
        {"m.tflite", "m.report.json"},
        _mode_is(out, expected),
    )


@case
def out_through_directory_link(d, model):
    (d / "real").mkdir()
    (d / "linked").symlink_to(d / "real")
    return Plan(
        quantize(model, "-o", str(d / "linked" / "m.tflite")),
        ACCEPTED,
        {"real/m.tflite", "real/m.report.json"},
    )


@case
def strict_writes_nothing(d, model):
    return Plan(
        quantize(model, "-o", str(d / "m.tflite"), "--strict", "--keep-float", "*"), frozenset({1})
    )


@case
def check_output_missing_directory(d, model):
    return Plan(["check", str(model), "--format", "json", "-o", str(d / "no" / "r.json")], REFUSED)


@case
def check_output_name_too_long(d, model):
    return Plan(["check", str(model), "--format", "sarif", "-o", str(d / ("c" * 300))], REFUSED)


@case
def check_output_is_directory(d, model):
    return Plan(["check", str(model), "--format", "junit", "-o", str(d)], REFUSED)


@case
def check_output_is_input(d, model):
    return Plan(["check", str(model), "--format", "json", "-o", str(model)], REFUSED)


@case
def check_output_fifo(d, model):
    os.mkfifo(d / "r.json")
    return Plan(["check", str(model), "--format", "json", "-o", str(d / "r.json")], REFUSED)


@case
def array_output_too_long(d, model):
    return Plan(
        ["array", "quantize", str(DATA), "-o", str(d / ("a" * 300 + ".npy")), "--scale", "0.1"],
        REFUSED,
    )
