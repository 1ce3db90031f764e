"""Realistic audio for the bench's audio models, made on this machine: speech synthesised with
Debian's `espeak-ng`, synthesised music, and noise mixed in at chosen signal-to-noise ratios.

Needs only numpy, scipy (resampling; scikit-image brings it) and the `espeak-ng` program, so it
runs in the project's bench venv and in the TensorFlow venv alike (never imports qtool).
"""

from __future__ import annotations

import io
import math
import shutil
import subprocess
import wave
from dataclasses import dataclass

import numpy as np

ESPEAK_RATE = 22050  # espeak-ng writes 16-bit mono at this rate


@dataclass(frozen=True)
class Voice:
    """One espeak-ng speaker: a voice with a variant, words per minute and pitch (0-99)."""

    name: str  # e.g. "en-us+f3"
    speed: int
    pitch: int


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def speak(text: str, voice: Voice, rate: int) -> np.ndarray:
    """`text` spoken by `voice`, as float32 samples in [-1, 1] at `rate` Hz."""
    if not espeak_available():
        raise RuntimeError("espeak-ng is missing: `make corpus` installs it (apt-get)")
    options = ["-v", voice.name, "-s", str(voice.speed), "-p", str(voice.pitch)]
    wav = subprocess.run(
        ["espeak-ng", *options, "--stdout", text],
        check=True,
        capture_output=True,
    ).stdout
    with wave.open(io.BytesIO(wav)) as reader:
        source_rate = reader.getframerate()
        # espeak-ng streams to stdout with an unknown length in the header: read every frame
        frames = reader.readframes(reader.getnframes() or 1 << 30)
    samples = np.frombuffer(frames, "<i2").astype(np.float32) / 32768.0
    return resample(samples, source_rate, rate)


def resample(samples: np.ndarray, source: int, target: int) -> np.ndarray:
    """Polyphase resampling (scipy's, with its anti-aliasing filter)."""
    if source == target:
        return samples.astype(np.float32)
    from scipy.signal import resample_poly

    common = math.gcd(source, target)
    return resample_poly(samples, target // common, source // common).astype(np.float32)


def noise(length: int, rng: np.random.Generator) -> np.ndarray:
    """Unit-power noise of a random colour: white, pink (1/f) or brown (1/f^2) power."""
    exponent = rng.choice([0.0, 1.0, 2.0])
    spectrum = np.fft.rfft(rng.standard_normal(length))
    frequencies = np.arange(len(spectrum), dtype=np.float64)
    frequencies[0] = 1.0
    shaped = np.fft.irfft(spectrum / frequencies ** (exponent / 2), n=length)
    return (shaped / (np.sqrt(np.mean(shaped**2)) + 1e-12)).astype(np.float32)


def mix(signal: np.ndarray, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    """`signal` plus coloured noise at `snr_db` below the signal's power."""
    power = float(np.mean(signal**2)) or 1e-8
    return signal + noise(len(signal), rng) * np.sqrt(power / 10 ** (snr_db / 10))


def place(utterance: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """The utterance at a random offset inside `length` samples of silence (cut to fit)."""
    out = np.zeros(length, np.float32)
    utterance = utterance[:length]
    start = int(rng.integers(0, length - len(utterance) + 1))
    out[start : start + len(utterance)] = utterance
    return out


# Music for the audio-to-MIDI model: notes with harmonics, envelopes and vibrato, in chords.


def note(
    midi: float, seconds: float, rate: int, rng: np.random.Generator, brightness: float
) -> np.ndarray:
    """One note: a fundamental with decaying harmonics (a random timbre), an attack-decay-
    sustain-release envelope and a slow vibrato."""
    count = int(seconds * rate)
    time = np.arange(count) / rate
    frequency = 440.0 * 2 ** ((midi - 69) / 12)
    vibrato = rng.uniform(0, 0.006) * np.sin(2 * np.pi * rng.uniform(4, 7) * time)
    phase = 2 * np.pi * np.cumsum(frequency * (1 + vibrato)) / rate
    tone = np.zeros(count)
    for harmonic in range(1, 12):
        if frequency * harmonic >= rate / 2:
            break
        tone += rng.uniform(0.5, 1.0) * brightness ** (harmonic - 1) * np.sin(harmonic * phase)
    attack, release = rng.uniform(0.005, 0.08), rng.uniform(0.05, 0.3)
    envelope = np.minimum(time / attack, 1.0) * np.exp(-time * rng.uniform(0.3, 3.0))
    envelope *= np.clip((seconds - time) / release, 0.0, 1.0)
    return (tone * envelope).astype(np.float32)


def music(length: int, rate: int, rng: np.random.Generator, pitches: np.ndarray) -> np.ndarray:
    """`length` samples of notes and chords drawn from `pitches` (MIDI numbers), with a little
    noise, peak-normalised to a random level."""
    out = np.zeros(length, np.float32)
    position = 0
    while position < length:
        seconds = rng.uniform(0.15, 1.2)
        chord = rng.choice(pitches, size=int(rng.integers(1, 4)), replace=False)
        brightness = rng.uniform(0.3, 0.8)
        for midi in chord:
            sound = note(float(midi), seconds + 0.3, rate, rng, brightness)[: length - position]
            out[position : position + len(sound)] += sound / len(chord)
        position += int(seconds * rate * rng.uniform(0.6, 1.0))
    out = mix(out, rng.uniform(20, 45), rng)
    return (out / (np.abs(out).max() + 1e-9) * rng.uniform(0.2, 0.95)).astype(np.float32)


# Log-mel features (what a small keyword spotter reads): 25 ms windows, 10 ms hop.


def mel_filters(bins: int, fft_size: int, rate: int, low: float, high: float) -> np.ndarray:
    """Triangular filters on the mel scale, shape (fft_size // 2 + 1, bins)."""

    def to_mel(hz):
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    edges = 700.0 * (10 ** (np.linspace(to_mel(low), to_mel(high), bins + 2) / 2595.0) - 1.0)
    frequencies = np.linspace(0, rate / 2, fft_size // 2 + 1)
    rising = (frequencies[:, None] - edges[None, :-2]) / (edges[1:-1] - edges[:-2])
    falling = (edges[None, 2:] - frequencies[:, None]) / (edges[2:] - edges[1:-1])
    return np.maximum(0.0, np.minimum(rising, falling)).astype(np.float32)


def log_mel(samples: np.ndarray, rate: int, bins: int = 32) -> np.ndarray:
    """Frames x bins log-mel energies (Hann window of 25 ms, hop 10 ms, 60-7600 Hz)."""
    window, hop, fft_size = int(0.025 * rate), int(0.010 * rate), 512
    count = 1 + max(0, len(samples) - window) // hop
    index = np.arange(window)[None, :] + hop * np.arange(count)[:, None]
    frames = samples[index] * np.hanning(window).astype(np.float32)
    power = np.abs(np.fft.rfft(frames, fft_size)) ** 2
    return np.log(power @ mel_filters(bins, fft_size, rate, 60.0, 7600.0) + 1e-6).astype(np.float32)
