"""The bench corpus's audio synthesis (bench/audio.py): the properties its data relies on. No
download and no espeak-ng here: speech is made by `make corpus`, not by tests."""

from __future__ import annotations

import numpy as np
import pytest

from bench.audio import log_mel, mel_filters, mix, music, noise, place

RATE = 16000


@pytest.mark.parametrize("snr_db", [0.0, 12.5, 30.0])
def test_mix_adds_noise_at_the_requested_snr(snr_db: float) -> None:
    rng = np.random.default_rng(0)
    signal = np.sin(np.arange(RATE) * 0.05).astype(np.float32)
    noisy = mix(signal, snr_db, rng)
    measured = 10 * np.log10(np.sum(signal**2) / np.sum((noisy - signal) ** 2))
    assert measured == pytest.approx(snr_db, abs=0.01)


def test_noise_has_unit_power_and_its_colour_tilts_the_spectrum() -> None:
    powers, tilts = [], set()
    for seed in range(12):
        sample = noise(8192, np.random.default_rng(seed))
        powers.append(float(np.mean(sample.astype(np.float64) ** 2)))
        spectrum = np.abs(np.fft.rfft(sample)) ** 2
        tilts.add(round(float(np.log10(spectrum[20:200].mean() / spectrum[2000:4000].mean()))))
    assert np.allclose(powers, 1.0, atol=1e-4)
    assert len(tilts) >= 2  # white and coloured noise both drawn


def test_place_keeps_the_utterance_whole_inside_silence() -> None:
    utterance = np.arange(1, 101, dtype=np.float32)
    placed = place(utterance, 1000, np.random.default_rng(3))
    start = int(np.flatnonzero(placed)[0])
    assert placed.shape == (1000,)
    assert np.array_equal(placed[start : start + 100], utterance)
    assert np.count_nonzero(placed) == 100


def test_mel_filters_are_triangles_that_cover_the_band() -> None:
    filters = mel_filters(32, 512, RATE, 60.0, 7600.0)
    assert filters.shape == (257, 32)
    assert filters.min() >= 0.0 and filters.max() <= 1.0
    peaks = filters.argmax(axis=0)
    assert np.all(np.diff(peaks) >= 0)  # ordered by frequency
    assert np.all(filters.max(axis=0) > 0.5)  # no empty band


def test_log_mel_frames_a_tone_into_its_band() -> None:
    time = np.arange(RATE) / RATE
    features = log_mel(np.sin(2 * np.pi * 1000 * time).astype(np.float32), RATE)
    assert features.shape == (98, 32)  # 25 ms windows every 10 ms over 1 s
    loudest = features.mean(axis=0).argmax()
    peaks = mel_filters(32, 512, RATE, 60.0, 7600.0).argmax(axis=0) * RATE / 512
    assert abs(peaks[loudest] - 1000) < 150


def test_music_is_seeded_bounded_and_uses_only_the_given_pitches() -> None:
    pitches = np.array([60, 64, 67])  # a C major triad
    first = music(22050, 22050, np.random.default_rng(4), pitches)
    again = music(22050, 22050, np.random.default_rng(4), pitches)
    assert np.array_equal(first, again)
    assert 0.2 <= np.abs(first).max() <= 0.95
    spectrum = np.abs(np.fft.rfft(first))
    strongest = np.argmax(spectrum)  # 1 Hz bins over 1 s
    fundamentals = 440.0 * 2 ** ((pitches - 69) / 12)
    harmonics = np.outer(fundamentals, np.arange(1, 12)).ravel()
    assert np.min(np.abs(harmonics - strongest)) < 3
