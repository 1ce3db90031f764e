"""What a calibration's pass sets aside on the way: the held-out folds' samples (`FoldSplit`)
and the values of a few tensors (`KeptValues`), so that neither needs a pass of its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from qtool.calibrate.datasets import Batch, Dataset


class KeptValues:
    """An observer keeping copies of some tensors' values, chunk by chunk (each tensor's calls
    come in chunk order, on one thread: `tensors_apart`)."""

    tensors_apart = True

    def __init__(self, tensors: Sequence[int]) -> None:
        self.tensors = list(tensors)
        self.parts: dict[int, list[np.ndarray]] = {t: [] for t in tensors}

    def __call__(self, t: int, value: np.ndarray) -> None:
        if t in self.parts:
            self.parts[t].append(np.array(value))  # a view of the interpreter's memory

    def stacked(self, leading_one: bool) -> list[np.ndarray]:
        """Each tensor's values, samples stacked (chunks joined, or single samples stacked)."""
        join = np.concatenate if leading_one else np.stack
        return [join(self.parts[t]) for t in self.tensors]


class FoldSplit:
    """The samples of `dataset` in fold `kept` as a lazy dataset (`fitting`) whose passes set the
    `wanted` folds' samples aside as they read past them (`held`, the last complete pass's): the
    calibration's pass yields them without a second read of the data (pose_landmark_full's
    64 samples: 0.2 s). Only the first samples hold any (collect's FOLD_WINDOW), so memory stays
    bounded."""

    def __init__(
        self,
        dataset: Dataset,
        assign: Callable[[np.ndarray], np.ndarray],
        kept: int,
        wanted: Sequence[int],
    ) -> None:
        self.dataset = dataset
        self.assign = assign  # each index's fold
        self.kept = kept
        self.wanted = tuple(wanted)
        self.held: dict[int, list[np.ndarray]] | None = None
        self.fitting = Dataset(read=self._read, source=dataset.source, synthetic=dataset.synthetic)

    def _read(self) -> Iterator[Batch]:
        self.held = None
        parts: dict[int, list[Batch]] = {fold: [] for fold in self.wanted}
        start = 0
        for batch in self.dataset.iter_chunks(256):
            n = batch[0].shape[0]
            folds = self.assign(np.arange(start, start + n))
            start += n
            for fold in self.wanted:
                mask = folds == fold
                if mask.any():
                    parts[fold].append([values[mask] for values in batch])
            mask = folds == self.kept
            if mask.any():
                yield [values[mask] for values in batch]
        self.held = {
            fold: [np.concatenate(arrays) for arrays in zip(*chunks, strict=True)]
            for fold, chunks in parts.items()
            if chunks
        }

    def held_folds(self) -> dict[int, list[np.ndarray]]:
        """The held-out folds' samples (fold number -> one array per input): those the last
        complete pass set aside, else read now."""
        if self.held is None:
            for _ in self._read():
                pass
        assert self.held is not None
        return self.held
