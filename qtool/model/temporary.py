"""A large model handed to LiteRT as a file it maps, not as bytes copied for it.

LiteRT takes a model as bytes (`model_content`, kept by reference) or as a path, which it maps
into memory. Bytes of a 100 MB model are a second copy of its weights in this process (and a
third while the flatbuffer builder's copy is cut out), and a child process (`litert_worker`)
gets one more of its own through the pipe. A temporary file with the buffers after the
flatbuffer (the layout of `serialize_model` beyond 2 GiB, which LiteRT reads alike: same
outputs, tested) is written straight from the weights' arrays, costs this process nothing once
written, and is shared by every interpreter and child that maps it. Small models stay bytes:
a file saves them nothing worth its write.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from contextlib import suppress

from qtool.heap import drop_file_pages
from qtool.model.graph import Model
from qtool.model.io import model_to_bytes, serialize_model
from qtool.model.source import MAPPED_SOURCE_BYTES, drop_pages

# Weights above this go to LiteRT as a file (the bytes route below it: most MediaPipe models).
IN_FILE_BYTES = MAPPED_SOURCE_BYTES


class TemporaryModelFile:
    """`model` written to a new temporary file (buffers after the flatbuffer), removed by
    `close()` or when the object is collected (at exit at the latest)."""

    def __init__(self, model: Model) -> None:
        handle, self.path = tempfile.mkstemp(prefix="qtool-", suffix=".tflite")
        self._remove = weakref.finalize(self, _remove, self.path)
        try:
            with os.fdopen(handle, "wb") as stream:
                for chunk in serialize_model(model, inline_limit=0):
                    stream.write(chunk)
        except BaseException:
            self.close()
            raise
        # Writing read every weight of a mapped source: those pages are not needed resident
        # while LiteRT maps this file and packs a copy of its own (the peak of a large model).
        drop_pages(model.source_data)

    def release_pages(self) -> None:
        """Drop this process's resident pages of the file's mappings: once an interpreter has
        packed the weights it maps (XNNPACK keeps its own packed copy), they are only cache,
        and a page read again is read again from the file (a 100 MB model's interpreter holds
        1x its size less)."""
        drop_file_pages(self.path)

    def close(self) -> None:
        """Remove the file (an interpreter that mapped it keeps its mapping)."""
        self._remove()


def _remove(path: str) -> None:
    with suppress(OSError):
        os.unlink(path)


def model_for_litert(model: Model) -> bytes | TemporaryModelFile:
    """The model as LiteRT should receive it: a temporary file when its weights are large
    (bytes when the file cannot be written: a full or read-only temporary directory), else
    its bytes."""
    if model.weights_nbytes() > IN_FILE_BYTES:
        with suppress(OSError):
            return TemporaryModelFile(model)
    return model_to_bytes(model)


def interpreter_source(model: bytes | TemporaryModelFile) -> dict[str, bytes | str]:
    """The keyword that gives LiteRT's Interpreter `model` (from `model_for_litert`)."""
    if isinstance(model, TemporaryModelFile):
        return {"model_path": model.path}
    return {"model_content": model}
