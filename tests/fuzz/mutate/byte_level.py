"""Byte-level mutants: bit flips, overwritten words, truncations, zeroed runs and splices of the
flatbuffer, placed mostly outside the weight buffers."""

from __future__ import annotations

import random

import numpy as np

from qtool.model import parse_model


def weight_spans(base: bytes) -> list[tuple[int, int]]:
    """Where the weight buffers lie in the file (flips there only change numbers)."""
    model = parse_model(base)
    origin = np.frombuffer(base, np.uint8).__array_interface__["data"][0]
    spans = []
    for buffer in model.buffers:
        if buffer.nbytes:
            start = buffer.data.__array_interface__["data"][0] - origin
            if 0 <= start < len(base):
                spans.append((start, start + buffer.nbytes))
    return spans


def _structure_position(size: int, spans: list[tuple[int, int]], rng: random.Random) -> int:
    for _ in range(20):
        position = rng.randrange(size)
        if not any(a <= position < b for a, b in spans):
            return position
    return rng.randrange(size)


def byte_mutant(base: bytes, rng: random.Random, spans: list[tuple[int, int]]) -> tuple[bytes, str]:
    blob = bytearray(base)
    roll = rng.random()
    if roll < 0.35:
        for _ in range(rng.randint(1, 12)):
            position = _structure_position(len(blob), spans, rng)
            blob[position] ^= 1 << rng.randrange(8)
        return bytes(blob), "bitflip"
    if roll < 0.55:
        for _ in range(rng.randint(1, 4)):
            position = _structure_position(len(blob) - 4, spans, rng) & ~3
            value = rng.choice((0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, len(blob), len(blob) + 8))
            blob[position : position + 4] = value.to_bytes(4, "little")
        return bytes(blob), "word"
    if roll < 0.7:
        return bytes(blob[: rng.randrange(8, len(blob))]), "truncate"
    if roll < 0.8:
        start = _structure_position(len(blob), spans, rng)
        end = min(len(blob), start + rng.randint(1, 64))
        blob[start:end] = bytes(end - start)
        return bytes(blob), "zero"
    if roll < 0.9:
        start = rng.randrange(len(blob))
        chunk = blob[start : start + rng.randint(1, 256)]
        at = rng.randrange(len(blob))
        return bytes(blob[:at] + chunk + blob[at:]), "splice"
    position = _structure_position(len(blob), spans, rng)
    blob[position] = rng.randrange(256)
    return bytes(blob), "byte"
