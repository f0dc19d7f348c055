"""Measuring the memory a run really takes, to hold it to the plan (``Plan.peak_bytes``, ``Plan.curve``).

Two measures (docs/memory.md, "Measured peak"):

* ``measured_peak(exe, inputs)``: the peak of NumPy's traced allocations during ``exe.run`` (NumPy
  reports its data buffers to ``tracemalloc`` in domain ``NUMPY_DOMAIN``), plus the inputs (the plan
  counts them; they were allocated before the run).  The graph is run twice under ``tracemalloc``:
  the first run compiles what it must and fills the caches a run keeps (the executable's buffer
  pool, kernels' per-thread scratch); its outputs are dropped, then the second run is measured from
  what is held then.  So what outlives a run (a pooled buffer, a kept scratch) is counted: a training
  loop sees it on every step.  Left out: the Python objects (every other domain), and the runtime's
  own fixed per-thread buffers (``RUNTIME_OWN``: the products' 8 MB of packing buffers and the
  element-wise kernels' L2-sized blocks, the same for any graph size; those a thread makes during the
  measured run are subtracted from its peak too, which errs low by them if they came after the peak).
  ``trace_run`` returns the details (and a snapshot to group the allocations by traceback);
  ``step_excess`` lists what each step allocates beside its results (the temporaries to find).
* ``resident_peak(text, inputs)``: the peak resident memory (``VmHWM`` of ``/proc/self/status``) of
  a run in a fresh subprocess, for benchmarks.  The high-water mark is reset (``/proc/self/clear_refs``,
  "5") after a first run, so it is the measured run's, whatever compiling took; ``ru_maxrss``
  cannot be reset and is used only where ``clear_refs`` is missing (then it includes the compile).
  The memory a graph takes above the runtime's own is ``resident_peak`` at its size minus that of
  the same graph at a tiny size.

NumPy temporaries allocated by numba's runtime (``np.empty`` inside an ``@njit`` function) are not
traced: kernels allocate in Python and pass their buffers in.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import tempfile
import tracemalloc
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional

import numpy as np

from ..errors import ArgumentError

if TYPE_CHECKING:
    from ..backends.cpu.runtime import Executable

__all__ = ["NUMPY_DOMAIN", "RUNTIME_OWN", "Measure", "measured_peak", "trace_run", "step_excess",
           "resident_peak"]

# The tracemalloc domain NumPy reports its data allocations in (NumPy's ``alloc.c``).
NUMPY_DOMAIN = 389047

# Fixed per-thread buffers of the runtime, by the function allocating them (module, function): the
# same size for any graph, so part of "the runtime's own memory", not the graph's.
RUNTIME_OWN = (("gradir.backends.cpu.kernels._jit_goto", "buffers"), ("gradir.backends.cpu.kernels.activation.blocks",
                                                                      "_scratch"))


@dataclass
class Measure:
    """One measured run (bytes)."""

    peak: int  # inputs + the peak of the NumPy data the run held (what ``measured_peak`` returns)
    inputs: int  # the inputs' bytes (counted as the plan does)
    held: int  # NumPy data held when the measured run started (pool, kept scratch), in ``peak``
    runtime_own: int  # the runtime's own fixed buffers (``RUNTIME_OWN``), left out of ``peak``
    python: int  # Python objects traced when the run started, left out of ``peak``
    snapshot: Optional[tracemalloc.Snapshot] = None  # NumPy's blocks at the end of the run, if asked


@contextlib.contextmanager
def _threads(exe: "Executable", threads: Optional[int]) -> Iterator[None]:
    if threads is None:
        yield
        return
    from ..backends.cpu.runtime import check_threads
    check_threads(threads)
    saved = exe.threads
    exe.threads = threads
    try:
        yield
    finally:
        exe.threads = saved


def _own_lines() -> set[tuple[str, int]]:
    """The (file, line) of every line of the ``RUNTIME_OWN`` functions (an allocation is the runtime's own
    when the innermost Python frame that made it is one of them)."""
    import importlib
    import inspect
    out = set()
    for mod, fn in RUNTIME_OWN:
        f = getattr(importlib.import_module(mod), fn)
        lines, first = inspect.getsourcelines(f)
        out.update((inspect.getsourcefile(f), first + k) for k in range(len(lines)))
    return out


def _is_own(tb: tracemalloc.Traceback, own: set[tuple[str, int]]) -> bool:
    fr = tb[-1]  # the innermost frame
    return (fr.filename, fr.lineno) in own


def trace_run(exe: "Executable", inputs: Mapping[str, Any], threads: Optional[int] = None,
              frames: int = 16, snapshot: bool = False) -> Measure:
    """Measure a run of ``exe`` on ``inputs`` under ``tracemalloc`` (the module docstring); with
    ``snapshot``, keep NumPy's blocks live at the end of the measured run (``Measure.snapshot``: group
    them with ``snapshot.statistics("traceback")``; ``step_excess`` finds what a step allocates and frees)."""
    if tracemalloc.is_tracing():
        raise ArgumentError("trace_run: tracemalloc is already tracing; stop it first")
    if not isinstance(frames, int) or frames < 1:
        raise ArgumentError(f"frames must be a positive integer, got {frames!r}")
    arrays, _ = exe.check_inputs(inputs)
    nin = sum(a.nbytes for a in arrays.values())
    with _threads(exe, threads):
        _release_kept_scratch()
        exe._pool.clear()  # what it kept was allocated before tracing: the warm run refills it, traced
        gc.collect()
        tracemalloc.start(frames)
        try:
            out = exe.run(arrays)  # compiles what it must, fills the pool and the kept scratch
            del out
            gc.collect()
            start = tracemalloc.take_snapshot()
            total0 = tracemalloc.get_traced_memory()[0]
            numpy0 = own = 0
            lines = _own_lines()
            for tr in start.traces:
                if tr.domain == NUMPY_DOMAIN:
                    numpy0 += tr.size
                    if _is_own(tr.traceback, lines):
                        own += tr.size
            tracemalloc.reset_peak()
            out = exe.run(arrays)
            peak = tracemalloc.get_traced_memory()[1]
            snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, NUMPY_DOMAIN)])
            # a thread that first multiplied in this run made its packing buffers now: the runtime's too
            before = Counter((tr.size, tr.traceback) for tr in start.traces if tr.domain == NUMPY_DOMAIN)
            after = Counter((tr.size, tr.traceback) for tr in snap.traces)
            late = sum(size * (k - before[size, tb]) for (size, tb), k in after.items()
                       if k > before[size, tb] and _is_own(tb, lines))
            del start
            own += late
            if not snapshot:
                snap = None
            del out
        finally:
            tracemalloc.stop()
    python = total0 - numpy0
    return Measure(nin + peak - python - own, nin, numpy0 - (own - late), own, python, snap)


def _release_kept_scratch() -> None:
    """Drop the scratch that kernels keep on the calling thread between calls (LSTMGrad's ``[S, B, D, 4H]``
    buffer), so that the warm run allocates it under tracing and it is counted.  (Another thread's cannot be
    dropped from here: with more threads, a buffer a worker kept from before the measurement is not seen.)"""
    from ..backends.cpu.kernels import lstm
    lstm.release_scratch()


def measured_peak(exe: "Executable", inputs: Mapping[str, Any], threads: Optional[int] = None) -> int:
    """The measured peak of a run of ``exe`` on ``inputs`` (bytes; ``trace_run``): the inputs plus the
    peak of NumPy's data during the run, comparable with ``exe.plan.peak_bytes``."""
    return trace_run(exe, inputs, threads).peak


def step_excess(exe: "Executable", inputs: Mapping[str, Any]) -> list[tuple[int, int, str]]:
    """What each step allocates beside its results while it runs, biggest first: ``(bytes, step
    index, op name)`` for the steps whose traced NumPy peak exceeded their new results (the
    temporaries and scratch the plan does not know about, unless declared: ``KernelInfo.scratch``).
    The steps run one by one on this thread, every result in a fresh buffer (no pool), after a run on this
    thread (what kernels keep on their thread is then there; LSTMGrad's da is dropped first, and counted)."""
    from ..backends.cpu.executor import Run
    arrays, types = exe.check_inputs(inputs)
    with _threads(exe, 1):
        exe.run(arrays)  # compiles what it must; this thread's kept scratch is then there (not counted)
    _release_kept_scratch()
    rows = []
    saved = exe._pool
    exe._pool = _NoPool()
    try:
        run = Run(exe, dict(arrays), types, False, None)
        tracemalloc.start(1)
        try:
            for st in exe.plan.steps:
                tracemalloc.reset_peak()
                cur0 = tracemalloc.get_traced_memory()[0]
                run.run_step(st)
                peak = tracemalloc.get_traced_memory()[1] - cur0
                fresh = 0 if st.view else sum(types[r].nbytes or 0 for j, r in enumerate(st.results)
                                              if j not in st.inplace)
                if peak - fresh > 0:
                    rows.append((peak - fresh, st.index, st.op.op_name))
        finally:
            tracemalloc.stop()
    finally:
        exe._pool = saved
    return sorted(rows, reverse=True)


class _NoPool:
    """A buffer pool that keeps nothing: every result is a fresh allocation."""

    def take(self, dtype: Any, shape: Any) -> None:
        return None

    def give(self, arr: Any) -> None:
        pass


# The child of ``resident_peak``: compile, run once, reset the high-water mark, run again, print it.
_CHILD = r"""
import os, resource, sys
import numpy as np
import gradir
path, npz, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
exe = gradir.compile(path, threads=threads)
with np.load(npz) as z:
    inputs = {k: z[k] for k in z.files}
out = exe.run(inputs)
del out
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    how = "VmHWM"
except OSError:
    how = "ru_maxrss"
exe.run(inputs)
peak = status("VmHWM") if how == "VmHWM" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(how, peak)
"""


def resident_peak(text: str, inputs: Mapping[str, np.ndarray], threads: int = 1,
                  env: Optional[Mapping[str, str]] = None) -> tuple[int, str]:
    """The peak resident memory (bytes) of a run of the graph ``text`` on ``inputs`` in a fresh Python
    process, and how it was read (``"VmHWM"``, reset after a first run; ``"ru_maxrss"`` where the reset
    is not possible).  Subtract the same at a tiny size for the memory above the runtime's own."""
    if not isinstance(text, str):
        raise ArgumentError(f"resident_peak takes the graph's text, not {type(text).__name__}")
    with tempfile.TemporaryDirectory(prefix="gradir-rss-") as tmp:
        gir = os.path.join(tmp, "graph.gir")
        npz = os.path.join(tmp, "inputs.npz")
        with open(gir, "w", encoding="utf-8") as f:
            f.write(text)
        np.savez(npz, **dict(inputs))
        child_env = dict(os.environ if env is None else env)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in [_root(), child_env.get("PYTHONPATH", "")] if p)
        done = subprocess.run([sys.executable, "-c", _CHILD, gir, npz, str(threads)], capture_output=True,
                              text=True, env=child_env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"resident_peak: the run failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    how, peak = done.stdout.split()[-2:]
    return int(peak), how


def _root() -> str:
    """The directory holding this ``gradir`` package (the child imports the same one)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
