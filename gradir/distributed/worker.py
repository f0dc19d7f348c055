"""What one shard task runs, in this process (``inline``) or on a Dask worker.

A worker compiles the shard graph once and keeps it in ``EXECUTABLES``, keyed by a hash of the
graph's text: every later task of the same graph (and a retried task) reuses it.
"""

from __future__ import annotations

import hashlib
import random
import time
from typing import Any, Mapping, Optional, Sequence

import numpy as np

__all__ = ["EXECUTABLES", "digest", "executable", "run_shard", "run_compiled", "ShardResult"]

EXECUTABLES: dict[tuple[str, Optional[int]], Any] = {}
MAX_CACHED = 16  # graphs per process; the oldest is dropped past that


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def executable(text: str, key: str, threads: Optional[int], ops: Sequence[str] = ()) -> Any:
    """The compiled shard graph of ``text`` (whose hash is ``key``), compiled on first use; ``ops``: the
    user op files the graph may use, loaded first (a worker process has not loaded them)."""
    exe = EXECUTABLES.get((key, threads))
    if exe is None:
        from ..backends.cpu.runtime import compile
        from ..text.syntax import parse
        from ..ops.userops import load_ops
        for path in ops:
            load_ops(path)
        exe = compile(parse(text, "<shard graph>"), threads=threads)
        while len(EXECUTABLES) >= MAX_CACHED:
            del EXECUTABLES[next(iter(EXECUTABLES))]
        EXECUTABLES[(key, threads)] = exe
    return exe


class ShardResult:
    """One shard's outputs (in the graph's output order) and where its time went."""

    def __init__(self, index: int, outputs: list[np.ndarray], seconds: float, compile_seconds: float) -> None:
        self.index = index
        self.outputs = outputs
        self.seconds = seconds  # running the shard graph
        self.compile_seconds = compile_seconds  # 0 when the worker had it compiled already

    def __reduce__(self):
        return (ShardResult, (self.index, self.outputs, self.seconds, self.compile_seconds))


def load_shard_file(path: str) -> dict[str, np.ndarray]:
    """A shard's ``.npz`` (pickles disabled), read where the task runs; a bad file is an error
    located at the file, as for ``--inputs``."""
    from ..arrayfiles import read_npz
    return read_npz(path, "shard file")


def run_shard(text: str, key: str, index: int, inputs: Mapping[str, np.ndarray], path: Optional[str] = None,
              threads: Optional[int] = None, jitter: float = 0.0, ops: Sequence[str] = ()) -> ShardResult:
    """Run shard ``index`` of the shard graph ``text`` (what a Dask task runs): see ``run_compiled``;
    ``ops``: the user op files to load first (``gradir.ops.userops.loaded_files``)."""
    t0 = time.perf_counter()
    compiled = (key, threads) in EXECUTABLES
    exe = executable(text, key, threads, ops)
    return run_compiled(exe, index, inputs, path, jitter, 0.0 if compiled else time.perf_counter() - t0)


def run_compiled(exe: Any, index: int, inputs: Mapping[str, np.ndarray], path: Optional[str] = None,
                 jitter: float = 0.0, compile_seconds: float = 0.0) -> ShardResult:
    """Run shard ``index`` on the compiled shard graph ``exe``: ``inputs`` (by label or value name) plus,
    with ``path``, the arrays of that shard's ``.npz``.  ``jitter`` (a test hook) first sleeps a random
    time up to that many seconds, so that results arrive out of order."""
    if jitter:
        time.sleep(random.uniform(0.0, jitter))
    t1 = time.perf_counter()
    arrays = dict(inputs)
    if path is not None:
        from ..errors import ShardError
        loaded = load_shard_file(path)
        both = sorted(set(loaded) & set(arrays))
        if both:
            raise ShardError(f"shard file {path} holds {', '.join(both)}, which is given to every shard too")
        arrays.update(loaded)
    out = exe.run(arrays)
    return ShardResult(index, [out[k] for k in exe.output_keys], time.perf_counter() - t1, compile_seconds)
