"""Worker processes for a campaign: a worker that dies is a crash, one that stalls is a hang.

Each worker runs tasks in-process (no interpreter start per run). The parent hands out one task
at a time per worker, and watches: if a worker's process disappears, its task crashed qtool; if it
exceeds the hard deadline (the in-process deadline failed to stop it), it is killed and its task
hung. Either way a fresh worker takes its place.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import resource
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tests.fuzz.judge import Verdict
from tests.fuzz.tasks import run_task

HARD_TIMEOUT = 600.0
# A worker may not grow past this much address space: a reader that loops on /dev/zero, say,
# then fails with MemoryError (a finding) instead of taking the machine's memory.
WORKER_ADDRESS_SPACE = 6 << 30


def describe(task: tuple) -> str:
    if task[0] == "model":
        return f"{task[1].name} {task[3]} seed {task[2]}"
    return " ".join(str(part) for part in task)


def _serve(conn, workdir: str) -> None:  # pragma: no cover - runs in the worker
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_ADDRESS_SPACE, WORKER_ADDRESS_SPACE))
    warnings.simplefilter("always")  # a leaking warning shows in every run that has it
    with contextlib.suppress(ImportError):  # imported once: forked judges then start fast
        import ai_edge_litert.interpreter  # noqa: F401
    while True:
        task = conn.recv()
        if task is None:
            return
        try:
            verdicts = run_task(task, workdir)
        except BaseException as exc:  # a fault of the harness itself, reported apart
            verdicts = [Verdict(describe(task), "harness", {"harness": repr(exc)})]
        conn.send(verdicts)


@dataclass
class _Slot:
    process: multiprocessing.Process
    conn: multiprocessing.connection.Connection
    task: tuple | None = None
    started: float = 0.0


class Pool:
    def __init__(self, size: int, workdir: str) -> None:
        self.context = multiprocessing.get_context("fork")
        self.workdir = workdir
        self.slots = [self._spawn() for _ in range(size)]

    def _spawn(self) -> _Slot:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_serve, args=(child, self.workdir), daemon=True)
        process.start()
        child.close()
        return _Slot(process, parent)

    def _replace(self, slot: _Slot) -> None:
        if slot.process.is_alive():
            slot.process.kill()
        slot.process.join()
        slot.conn.close()
        self.slots[self.slots.index(slot)] = self._spawn()

    def run(self, tasks: Iterable[tuple]) -> Iterator[tuple[tuple, list[Verdict]]]:
        pending = iter(tasks)
        busy = 0
        exhausted = False
        while True:
            for slot in self.slots:
                if slot.task is None and not exhausted:
                    task = next(pending, None)
                    if task is None:
                        exhausted = True
                        break
                    slot.task, slot.started = task, time.monotonic()
                    slot.conn.send(task)
                    busy += 1
            if busy == 0:
                return
            waitables = [s.conn for s in self.slots if s.task is not None]
            waitables += [s.process.sentinel for s in self.slots if s.task is not None]
            multiprocessing.connection.wait(waitables, timeout=1.0)
            for slot in list(self.slots):
                if slot.task is None:
                    continue
                task = slot.task
                if slot.conn.poll():
                    try:
                        verdicts = slot.conn.recv()
                    except EOFError:
                        verdicts = None
                    if verdicts is not None:
                        slot.task = None
                        busy -= 1
                        yield task, verdicts
                        continue
                if not slot.process.is_alive():
                    code = slot.process.exitcode
                    busy -= 1
                    self._replace(slot)
                    yield task, [Verdict(describe(task), "worker", {"crash": f"exit {code}"})]
                elif time.monotonic() - slot.started > HARD_TIMEOUT:
                    busy -= 1
                    self._replace(slot)
                    yield task, [Verdict(describe(task), "worker", {"hang": "hard deadline"})]

    def close(self) -> None:
        for slot in self.slots:
            if slot.process.is_alive():
                slot.conn.send(None)
            slot.process.join(timeout=10)
            if slot.process.is_alive():
                slot.process.kill()
