"""Spotify's basic-pitch 0.4.0 (PyPI): the audio-to-MIDI model as .tflite and as the SavedModel
it was converted from (TensorFlow's converter runs on that for the baselines), with audio data.

The model reads one window of mono audio at 22050 Hz, [1, 43844, 1] (basic-pitch's
AUDIO_N_SAMPLES: 2 s less one hop of 256), values in [-1, 1] as librosa loads them. Data:
synthesised music (notes with harmonics, attack/decay envelopes, vibrato, one to three notes at
a time, a little noise) and one window in eight of espeak-ng speech over quiet noise.
Calibration and held-out windows use different seeds, different pitch sets (calibration the MIDI
notes of even index from 36 to 95, held-out the odd ones, so no note is shared) and different
voices and phrases.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.audio import Voice, mix, music, place, speak
from bench.cache import save_atomically, unpack, wheel

PACKAGE, VERSION = "basic-pitch", "0.4.0"
PREFIX = "basic_pitch/saved_models/icassp_2022/"
RATE = 22050
WINDOW = 43844
SAMPLES = 48  # per split; a window is 175 kB of float32
SPEECH_EVERY = 8
SPLITS = {
    "calib": (np.arange(36, 96, 2), (Voice("en-us+m3", 150, 50), "the quick brown fox"), 31),
    "holdout": (np.arange(37, 96, 2), (Voice("en-gb+f2", 170, 65), "jumps over a lazy dog"), 32),
}


def fetch(cache: Path) -> tuple[Path, Path]:
    """(nmp.tflite, the nmp SavedModel directory), unpacked once from the wheel."""
    target = cache / "models"
    tflite, saved = target / "nmp.tflite", target / "nmp"
    parts = (tflite, saved / "saved_model.pb", saved / "variables" / "variables.index")
    if all(p.exists() for p in parts):
        return tflite, saved

    def wanted(member: str) -> str | None:
        if not member.startswith(PREFIX):
            return None
        relative = member[len(PREFIX) :]
        return relative if relative == "nmp.tflite" or relative.startswith("nmp/") else None

    unpack(wheel(PACKAGE, VERSION, cache / "wheels"), target, wanted)
    if not all(p.exists() for p in parts):
        raise FileNotFoundError(f"no nmp model under {PREFIX} in {PACKAGE} {VERSION}")
    return tflite, saved


def windows(split: str) -> np.ndarray:
    """SAMPLES windows [WINDOW, 1] of the split: music, and speech every SPEECH_EVERY-th."""
    pitches, (voice, text), seed = SPLITS[split]
    rng = np.random.default_rng(seed)
    out = np.empty((SAMPLES, WINDOW, 1), np.float32)
    for i in range(SAMPLES):
        if i % SPEECH_EVERY == SPEECH_EVERY - 1:
            spoken = place(speak(text, voice, RATE), WINDOW, rng)
            out[i, :, 0] = mix(spoken, rng.uniform(15, 30), rng) * rng.uniform(0.3, 0.9)
        else:
            out[i, :, 0] = music(WINDOW, RATE, rng, pitches)
    return np.clip(out, -1.0, 1.0)


def make_data(cache: Path) -> dict[str, Path]:
    """{"calib": path, "holdout": path}, written once and reused."""
    paths = {split: cache / "data" / f"nmp_{split}.npy" for split in SPLITS}
    for split, path in paths.items():
        if not path.exists():
            save_atomically(path, windows(split))
    return paths
