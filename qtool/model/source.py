"""A large model file read into a private, mapped copy instead of the heap.

Reading a 100 MB model into the heap holds its weights resident for the whole run, and when
LiteRT's first interpreter packs them (XNNPACK keeps its own copy, after reading the pages of the
file it maps) three copies were resident at once: 3.03x the model's size, measured. A large file
is instead copied into a temporary file that is unlinked at once and mapped read-only: the
weights are views of that mapping, resident only while something reads them, and the pages read
are the file's cache, which `drop_pages` gives back once a copy for LiteRT has been written from
them. The copy is this process's own (no name on disk, no other descriptor): nothing can
truncate or rewrite it under a reader, which a mapping of the user's file would allow (SIGBUS,
or bytes that change under the validator). Small files are read into the heap: a copy saves them
nothing worth its write.
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from typing import BinaryIO

# Files above this are copied and mapped; the same size sends a model to LiteRT as a file
# (`qtool.model.temporary`).
MAPPED_SOURCE_BYTES = 4 << 20
_COPY_CHUNK = 64 << 20


class SourceChanged(Exception):
    """The file's size changed while it was copied (`copied` bytes were read)."""

    def __init__(self, copied: int) -> None:
        super().__init__(copied)
        self.copied = copied


def read_source(handle: BinaryIO, size: int) -> bytes | mmap.mmap:
    """The whole file behind `handle` (`size` bytes by its fstat): a private read-only mapping
    of a copy when it is large and the temporary directory takes the copy, else bytes.
    Raises SourceChanged when a copy does not come to `size` bytes."""
    if size <= MAPPED_SOURCE_BYTES:
        return handle.read()
    try:
        with tempfile.TemporaryFile(prefix="qtool-source-") as copy:
            copied = _copy(handle, copy)
            if copied != size:
                raise SourceChanged(copied)
            return mmap.mmap(copy.fileno(), copied, access=mmap.ACCESS_READ)
    except OSError:  # no writable temporary directory, or a full one: the heap, as if small
        handle.seek(0)
        return handle.read()


def _copy(source: BinaryIO, target: BinaryIO) -> int:
    """Copy `source` from its start into `target` in the kernel where it can (no pass through
    this process's memory); the number of bytes copied."""
    source.seek(0)
    copied = 0
    if hasattr(os, "copy_file_range"):
        try:
            while done := os.copy_file_range(source.fileno(), target.fileno(), _COPY_CHUNK):
                copied += done
            return copied
        except OSError:  # e.g. a file system that does not support it: copy through a buffer
            source.seek(0)
            target.seek(0)
            target.truncate()
    shutil.copyfileobj(source, target, _COPY_CHUNK)
    return target.tell()


def drop_pages(data: object) -> None:
    """Give back this process's resident pages of a mapped source (`read_source`): they are
    cache of a file nobody else can write, read again from it on the next access. Bytes and
    platforms without madvise are left as they are."""
    if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        data.madvise(mmap.MADV_DONTNEED)
