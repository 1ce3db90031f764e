"""The small real tasks the bench's Keras models are trained on, with their calibration and
held-out splits. numpy, scipy, scikit-learn and scikit-image only (the TensorFlow venv has them).

* spoken digits: "zero" .. "nine" spoken by espeak-ng, 1 s at 16 kHz with coloured noise at
  5-30 dB SNR, as 98 frames of 32 log-mel energies standardised with the training set's mean
  and deviation. Training and calibration use one set of voices; held-out uses other voices
  (no voice shared) and another seed.
* handwritten digits: scikit-learn's 1,797 8x8 digits (UCI), pixels scaled to [0, 1]; the first
  1,300 train (calibration samples come from them), the other 497 are held out.
* photographs: crops of ten of scikit-image's photographs, labelled by the photograph they come
  from, at 96x96 scaled to [-1, 1] (MobileNetV2's range); training and calibration crops come
  from the left three quarters of each photograph, held-out crops from the right quarter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.audio import Voice, log_mel, mix, place, speak

RATE = 16000
FRAMES, MEL_BINS = 98, 32
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
TRAIN_VOICES = tuple(
    Voice(f"{name}+{variant}", speed, pitch)
    for name in ("en-us", "en-gb", "en-gb-scotland", "en-029", "en-us-nyc", "en-gb-x-gbclan")
    for variant, speed, pitch in (
        ("m1", 140, 40),
        ("f2", 170, 65),
        ("m4", 200, 50),
        ("f4", 155, 75),
    )
)
HOLDOUT_VOICES = tuple(
    Voice(f"{name}+{variant}", speed, pitch)
    for name in ("en-gb-x-rp", "en-gb-x-gbcwmd")
    for variant, speed, pitch in (("m3", 150, 45), ("f1", 185, 70), ("m6", 165, 30))
)
PHOTOGRAPHS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "brick",
    "grass",
    "gravel",
    "camera",
    "coins",
    "page",
)
PHOTO_SIZE = 96
CALIBRATION, HOLDOUT = 128, 128


@dataclass
class Task:
    """Training pairs, and the calibration and held-out samples qtool and the converter get."""

    x: np.ndarray
    y: np.ndarray
    calibration: np.ndarray
    holdout: np.ndarray
    holdout_labels: np.ndarray


def _utterances(voices, copies: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    features, labels = [], []
    for voice in voices:
        for label, word in enumerate(DIGITS):
            spoken = speak(word, voice, RATE)
            for _ in range(copies):
                clip = mix(place(spoken, RATE, rng), rng.uniform(5, 30), rng)
                features.append(log_mel(clip * rng.uniform(0.2, 1.0), RATE, MEL_BINS)[:FRAMES])
                labels.append(label)
    return np.stack(features), np.array(labels)


def spoken_digits() -> Task:
    """Spoken digit sequences [98, 32]; calibration is 128 training utterances."""
    rng = np.random.default_rng(5)
    x, y = _utterances(TRAIN_VOICES, 2, rng)
    holdout, holdout_labels = _utterances(HOLDOUT_VOICES, 2, np.random.default_rng(6))
    mean, std = x.mean(axis=(0, 1)), x.std(axis=(0, 1))
    x, holdout = (x - mean) / std, (holdout - mean) / std
    order = rng.permutation(len(x))
    x, y = x[order].astype(np.float32), y[order]
    chosen = np.random.default_rng(7).choice(len(holdout), min(HOLDOUT, len(holdout)), False)
    return Task(x, y, x[:CALIBRATION], holdout[chosen].astype(np.float32), holdout_labels[chosen])


def streamed(sequences: np.ndarray) -> np.ndarray:
    """Utterances one after another, as a streaming model sees them: [steps, 32] frames."""
    return np.concatenate(list(sequences)).astype(np.float32)


def handwritten_digits() -> Task:
    """scikit-learn's digits as [8, 8, 1] images in [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[..., None]
    x, y = images[:1300], digits.target[:1300]
    return Task(x, y, x[:CALIBRATION], images[1300:][:HOLDOUT], digits.target[1300:][:HOLDOUT])


def _photographs() -> list[np.ndarray]:
    from skimage import data

    images = []
    for name in PHOTOGRAPHS:
        image = getattr(data, name)()
        if image.ndim == 2:
            image = np.stack([image] * 3, axis=-1)
        images.append(image[..., :3].astype(np.float32) / 255.0)
    return images


def _crops(images, count: int, holdout: bool, rng) -> tuple[np.ndarray, np.ndarray]:
    from skimage.transform import resize

    x = np.empty((count, PHOTO_SIZE, PHOTO_SIZE, 3), np.float32)
    y = rng.integers(len(images), size=count)
    for i, label in enumerate(y):
        image = images[label]
        rows, cols = image.shape[:2]
        split = cols * 3 // 4
        left, right = (split, cols) if holdout else (0, split)
        side = int(rng.integers(64, min(160, right - left, rows) + 1))
        top = int(rng.integers(0, rows - side + 1))
        start = int(rng.integers(left, right - side + 1))
        crop = resize(image[top : top + side, start : start + side], (PHOTO_SIZE, PHOTO_SIZE))
        x[i] = crop[:, ::-1] if rng.random() < 0.5 else crop
    return x * 2.0 - 1.0, y


def photographs(train: int = 1000) -> Task:
    """Photograph crops [96, 96, 3] in [-1, 1], labelled by photograph."""
    images = _photographs()
    x, y = _crops(images, train, False, np.random.default_rng(8))
    calibration, _ = _crops(images, CALIBRATION, False, np.random.default_rng(9))
    holdout, holdout_labels = _crops(images, HOLDOUT, True, np.random.default_rng(10))
    return Task(x, y, calibration, holdout, holdout_labels)
