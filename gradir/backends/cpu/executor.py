"""Running a plan: the executors behind ``Executable.run`` (see ``gradir.backends.cpu.runtime``).

* ``straight_line_code``: the schedule as one generated Python function, for runs with
  nothing to overlap (no trace, no numerics checks, static shapes).
* ``Run.run_step`` in schedule order on the caller's thread (one thread, or a trace).
* ``Run._dataflow``: an op starts as soon as its operands are ready and a core is free, on
  ``threads`` workers sharing ``threads`` cores; the critical path first.

A run's execution state is its own: the ``Run`` object (values, pending readers, the cores
free), and the cores each step was given, a per-thread setting its kernel reads
(``kernels.parallel.cores``).  What stays process-wide, and why: BLAS's thread count
(OpenBLAS has one for the process; held to one thread, counted across overlapping runs,
while a graph with BLAS steps runs), the GIL switch interval (Python's own, lowered while
dataflow runs are active), and the worker thread pools (shared by size, so runs do not start
threads).  Also here: the buffer pool results are recycled through.
"""

from __future__ import annotations

import builtins
import contextlib
import heapq
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import numpy as np

from . import policy
from .buffers import BufferPool
from ...errors import Diagnostic, ExecutionError, GradirError
from .kernels import parallel
from ...transforms.schedule import Plan, Step
from ...ir.types import DType, TensorType, format_shape

__all__ = ["Run", "straight_line_code", "describe", "dtype_name"]

# GIL switch interval while ops run concurrently (seconds): 0.5 ms gave the best median
# two-thread speed-up here (1.49x vs 1.37x at Python's default 5 ms; 0.1 ms was worse).
SWITCH_INTERVAL = 0.0005


def blas_hold(plan: Plan) -> Any:
    """What a run of ``plan`` holds BLAS to: one thread whenever the graph has a BLAS step, with
    any thread count (one included), in every backend.  OpenBLAS's threaded GEMMs need not
    round as its single-threaded ones, and its thread count is process-wide; products use more
    cores by splitting themselves into blocks fixed by their shapes (``kernels.blocked``)."""
    return parallel.blas_limit(1) if plan.blas else contextlib.nullcontext()


_OOM = "out of memory"


def _exc_text(e: Exception) -> str:
    """A kernel's ValueError is a message for the user; anything else also names its type."""
    if type(e) is ValueError:
        return str(e)
    if isinstance(e, MemoryError):
        return _OOM
    return f"{type(e).__name__}: {e}"


def dtype_name(dt: np.dtype) -> str:
    """A dtype in words: gradir's name where it has one (``float16``, ``big-endian Int32`` otherwise)."""
    native = dt.newbyteorder("=") if dt.byteorder in "<>" else dt
    try:
        name = DType.from_numpy(native).value
    except ValueError:
        name = native.name
    return f"{'big' if dt.byteorder == '>' else 'little'}-endian {name}" if native != dt else name


def describe(a: Any) -> str:
    if isinstance(a, Planned):
        return str(a.type)
    return f"{dtype_name(a.dtype)} {format_shape(a.shape)}"


class Planned:
    def __init__(self, t: Optional[TensorType]) -> None:
        self.type = t


class Run:
    """One execution of a plan."""

    def __init__(self, exe: Any, arrays: dict, types: dict, check_numerics: bool,  # exe: the Executable
                 trace: Optional[list]) -> None:
        self.exe = exe
        self.plan = exe.plan
        self.values: dict[str, np.ndarray] = dict(arrays)
        self.types = types
        self.check_numerics = check_numerics
        self.trace = trace
        self.t0 = time.perf_counter()
        self.inputs = set(arrays)
        self.lock = threading.Lock()
        self.pending = dict(exe.plan.readers)  # dataflow: readers not yet done, per value

    # one step
    def run_step(self, st: Step, dataflow: bool = False, cores: int = 1) -> None:
        values = self.values
        args = [None if v is None else values[v] for v in st.operands]
        outs: list[Optional[np.ndarray]] = []
        for j, r in enumerate(st.results):
            t = self.types.get(r)
            if j in st.inplace:  # a donated buffer (reshaped: ``KernelInfo.donate`` allows another shape)
                a = args[st.inplace[j]]
                outs.append(a if t is None or a.shape == tuple(t.shape) else a.reshape(t.shape))
                continue
            outs.append(self.exe._pool.take(t.dtype.numpy, t.shape)
                        if t is not None and t.is_static and not st.view else None)
        start = time.perf_counter() if self.trace is not None else 0.0
        try:
            if st.view:  # the operand's buffer reshaped (``Op.VIEW``)
                res = (args[0].reshape(self.types[st.results[0]].shape),)
            elif len(st.results) == 1:
                res = st.kernel.fn(*args, out=outs[0], **st.op.kernel_attrs())
                res = (res,)
            else:
                res = st.kernel.fn(*args, out=tuple(outs), **st.op.kernel_attrs())
        except GradirError:
            raise
        except Exception as e:  # a kernel failed: say where, with the operand shapes
            raise self._error(st, _exc_text(e), args) from e
        if self.trace is not None:
            end = time.perf_counter()
            self.trace.append({"name": st.op.op_name, "cat": "op", "ph": "X", "pid": os.getpid(),
                               "tid": threading.get_ident() % 100000, "ts": (start - self.t0) * 1e6,
                               "dur": (end - start) * 1e6,
                               "args": {"results": ", ".join(st.results), "cores": cores,
                                        "line": st.op.loc.line.line if st.op.loc else None}})
        if len(res) != len(st.results):  # pragma: no cover - kernel bug
            raise self._error(st, f"kernel returned {len(res)} results, expected {len(st.results)}", args)
        for r, a, want in zip(st.results, res, outs):
            if not isinstance(a, np.ndarray):  # NumPy returns scalars for rank-0 results
                a = np.asarray(a)
            t = self.types.get(r)
            if t is not None and (a.shape != t.shape if t.is_static else a.ndim != t.rank) or \
                    (t is not None and a.dtype != t.dtype.numpy):
                raise self._error(st, f"kernel produced {describe(a)} for {r}, expected {t}", args)
            if self.check_numerics and a.dtype.kind == "f" and not np.isfinite(a).all():
                bad = np.argwhere(~np.isfinite(a))[0]
                what = "NaN" if np.isnan(a[tuple(bad)]) else "Inf"
                raise self._error(st, f"produced {what} in {r} at index {list(map(int, bad))} "
                                      f"(--check-numerics)", args, numerics=True)
            values[r] = a
        if not dataflow:  # schedule order: free after the last use in the schedule
            for v in st.free_after:
                self._free(st, v)
            return
        # steps finish in any order: free a value when its last reader is done
        keep = self.plan.keep
        for r in st.results:
            if r not in self.pending and r not in keep:
                self._free(st, r)  # never read
        with self.lock:
            dead = []
            views = self.plan.views
            for v in set(o for o in st.operands if o is not None):
                for w in (v, views[v]) if v in views else (v,):  # a view's reader reads its buffer too
                    self.pending[w] -= 1
                    if self.pending[w] == 0 and w not in keep:
                        dead.append(w)
        for v in dead:
            self._free(st, v)

    def _free(self, st: Step, v: str) -> None:
        a = self.values.pop(v, None)
        recycle = self.plan.recycle
        if (a is not None and v not in self.inputs and (recycle is None or v in recycle)
                and not any(st.operands[i] == v for i in st.inplace.values())):
            self.exe._pool.give(a)

    def _fail(self, k: int, e: BaseException) -> None:
        """Re-raise an exception from the generated code as a located ExecutionError."""
        if isinstance(e, GradirError) or k < 0 or not isinstance(e, Exception):
            raise e
        st = self.plan.steps[k]
        # operand arrays are gone from the generated function's locals: report their planned types
        args = [Planned(self.types.get(v)) if v is not None else None for v in st.operands]
        raise self._error(st, _exc_text(e), args) from e

    def _error(self, st: Step, msg: str, args: list, numerics: bool = False) -> ExecutionError:
        """The cause first, then where: ``CAUSE; in Op on line N, operands t2 Float32 [2, 4]``
        (with the source line under it when the graph came from text)."""
        op = st.op
        if msg == _OOM:
            msg = self._oom_message(st)
        shapes = ", ".join(f"{v} {describe(a)}" for v, a in zip(st.operands, args) if v is not None)
        span = op.loc.results[0] if op.loc and op.loc.results else None
        text = msg + (f"; in {op.op_name} on line {span.line}" if span is not None else f"; in {op.to_string()}")
        if not numerics and shapes:
            text += f", operands {shapes}"
        if span is not None:
            span = type(span)(span.line, span.col, len(op.to_string()) + span.col)
        return ExecutionError(Diagnostic(text, span, self.exe.graph.source if span else None,
                                         filename=self.exe._file))

    def _oom_message(self, st: Step) -> str:
        from ...fileio import human_bytes
        made = [f"{r} ({t}, {human_bytes(t.nbytes)})" for r in st.results
                for t in [self.types.get(r)] if t is not None and t.nbytes is not None]
        peak = self.plan.peak_bytes
        return (f"out of memory while computing {', '.join(made) or ', '.join(st.results)}"
                + (f"; the plan's peak is {human_bytes(peak)} of live values" if peak else ""))

    def execute(self) -> dict[str, np.ndarray]:
        # NaN/Inf are results, not warnings: --check-numerics reports them properly
        with np.errstate(all="ignore"):
            return self._execute()

    def _execute(self) -> dict[str, np.ndarray]:
        threads = self.exe.threads
        with blas_hold(self.plan):
            if self.trace is None and not self.check_numerics and self.types is self.plan.types and (
                    threads <= 1 or not self.plan.heavy_concurrency):
                with parallel.cores(threads):  # one step at a time: each gets every core
                    self.values = self.exe._straight_line()(self)
            elif threads <= 1 or len(self.plan.steps) < 2:
                with parallel.cores(threads):
                    for st in self.plan.steps:
                        self.run_step(st, cores=threads)
            else:
                # Kernels release the GIL for each of many short ufunc calls; with the default 5 ms
                # switch interval one worker can starve the other (a GIL convoy, seen in traces).
                with _short_switch_interval():
                    self._dataflow(threads)
        return self.values

    def _dataflow(self, threads: int) -> None:
        """Run the steps on ``threads`` workers (this thread and ``threads - 1`` pool threads),
        sharing ``threads`` cores.

        Each worker takes a ready step, runs it, marks its dependents and takes the next
        one itself: a chain of steps stays on one worker with no hand-over (a thread
        wake-up costs 50-300 us on these VMs).  Tiny ready steps go first (they unblock
        others at once, and take no core); then the step with the longest estimated path to
        the end (``Step.priority``: the critical path starts first), then the lowest schedule
        index.  A step other than a tiny one starts only when a core is free, and takes the
        cores free then, up to what its kernel can use, less one for each other ready
        element-wise step about as critical; it gives them back when it is done.  A step off
        the critical path, or a product that would start on fewer cores than it can use while
        a step is about to end, waits (``gradir.backends.cpu.policy``).  So a step runs on every core when
        nothing else needs one, and never more steps compute at once than there are cores.
        """
        steps = self.plan.steps
        n = len(steps)
        waiting = [len(st.deps) for st in steps]
        dependents: list[list[int]] = [[] for _ in steps]
        for st in steps:
            for d in st.deps:
                dependents[d].append(st.index)
        ready: list[tuple] = []  # heap of (not tiny, -priority, index)

        def push(k: int) -> None:
            st = steps[k]
            heapq.heappush(ready, (not st.tiny, -st.priority, k))

        for st in steps:
            if waiting[st.index] == 0:
                push(st.index)
        cond = threading.Condition()
        finished = 0
        active = 0
        free = threads  # cores not held by a running step
        running: dict[int, tuple[float, int]] = {}  # non-tiny steps running: start time, cores
        error: Optional[BaseException] = None

        def take() -> Optional[tuple[int, int]]:  # with cond held: (step, cores) or None
            nonlocal free
            if not ready:
                return None
            heavy, _, k = ready[0]
            if not heavy:  # tiny: runs at once, on no core of its own
                heapq.heappop(ready)
                return k, 0
            if free < 1:
                return None
            st = steps[k]
            if running and (policy.defer(st, running, steps, dependents)
                            or policy.wait_for_cores(st, free, running, steps)):
                return None
            heapq.heappop(ready)
            rivals = 0
            if free > 1 and st.width > 1 and not st.kernel.blas:  # products scale: they take all
                nxt = [heapq.heappop(ready) for _ in range(min(free - 1, len(ready)))]
                rivals = sum(1 for heavy, p, i in nxt if heavy and -p >= policy.SHARE * st.priority
                             and steps[i].cost >= policy.SHARE * st.cost and not steps[i].kernel.blas)
                for e in nxt:
                    heapq.heappush(ready, e)
            got = policy.grant(st, free - rivals)
            free -= got
            running[k] = (time.perf_counter(), got)
            return k, got

        def worker() -> None:
            nonlocal finished, active, error, free
            k: Optional[int] = None
            held = 0
            while True:
                with cond:
                    if k is not None:  # the step just run is done: release its dependents and cores
                        finished += 1
                        active -= 1
                        free += held
                        running.pop(k, None)
                        for d in dependents[k]:
                            waiting[d] -= 1
                            if waiting[d] == 0:
                                push(d)
                    while True:
                        if error is not None or finished == n:
                            cond.notify_all()
                            return
                        got = take()
                        if got is not None:
                            k, held = got
                            active += 1
                            # Wake another worker only when there is a step it could take now.  A
                            # worker woken for nothing runs on a core just when this step's block
                            # helpers wake up, and Linux then queues a helper behind this thread
                            # on its own core while the other core goes idle again: measured in
                            # `perf sched`, a 2-core product ran 12-15 ms on one core (16-19 ms
                            # instead of 12).
                            if ready and (free > 0 or not ready[0][0]):
                                cond.notify()
                            break
                        if active == 0:  # pragma: no cover - a cycle would be a planner bug
                            error = ExecutionError("internal error: the schedule deadlocked")
                            continue
                        cond.wait()
                try:
                    # a step on cores of its own runs pinned to a CPU no other running step uses
                    with np.errstate(all="ignore"), parallel.cores(max(1, held)), \
                            (parallel.pinned() if held and threads > 1 else contextlib.nullcontext()):
                        self.run_step(steps[k], dataflow=True, cores=max(1, held))
                except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
                    with cond:
                        error = error or e
                        active -= 1
                        free += held
                        running.pop(k, None)
                        cond.notify_all()
                    return

        pool = _executor(threads)
        helpers = []
        try:
            for _ in range(threads - 1):
                helpers.append(pool.submit(worker))
        except RuntimeError as e:  # the system refused another thread ("can't start new thread")
            with cond:
                error = error or ExecutionError(Diagnostic(
                    f"cannot start worker thread {len(helpers) + 2} of {threads}: {e}; run with fewer threads",
                    filename=self.exe._file))
                cond.notify_all()
        try:
            worker()
        except BaseException as e:  # e.g. Ctrl-C outside a step: stop the helpers too
            with cond:
                error = error or e
                cond.notify_all()
            raise
        finally:
            for f in helpers:
                # a helper still queued (the pool is busy with other runs) has nothing left
                # to do: drop it; a started one is waited for, so no worker writes after we return
                if not f.cancel():
                    f.result()
        if error is not None:
            raise error


def straight_line_code(plan: Plan, pool: BufferPool):
    env: dict[str, Any] = {"_P": pool.take, "_G": pool.give}
    local: dict[str, str] = {}
    lines = ["def _run(_R):", "    _V = _R.values", "    _s = -1", "    try:"]
    for name in plan.inputs:
        local[name] = f"v{len(local)}"
        lines.append(f"        {local[name]} = _V[{name!r}]")
    inputs = set(plan.inputs)
    for st in plan.steps:
        k = st.index
        args = []
        for v in st.operands:
            args.append("None" if v is None else local[v])
        res = []
        for r in st.results:
            local[r] = f"v{len(local)}"
            res.append(local[r])
        lines.append(f"        _s = {k}")
        if st.view:  # the operand's buffer reshaped (``Op.VIEW``)
            env[f"_S{k}"] = plan.types[st.results[0]].shape
            lines.append(f"        {res[0]} = {args[0]}.reshape(_S{k})")
        outs = []
        for j, r in enumerate(st.results):
            if j in st.inplace:
                t, o = plan.types.get(r), plan.types.get(st.operands[st.inplace[j]])
                if t is not None and o is not None and tuple(t.shape) != tuple(o.shape):  # ``KernelInfo.donate``
                    env[f"_D{k}_{j}"] = t.shape
                    outs.append(f"{args[st.inplace[j]]}.reshape(_D{k}_{j})")
                else:
                    outs.append(args[st.inplace[j]])
            elif not st.tiny and plan.types.get(r) is not None and plan.types[r].is_static:
                t = plan.types[r]
                env[f"_T{k}_{j}"] = (t.dtype.numpy, t.shape)
                outs.append(f"_P(*_T{k}_{j})")
            else:
                outs.append("None")
        uf = st.kernel.ufunc
        rank0 = plan.types.get(st.results[0]) is None or plan.types[st.results[0]].rank == 0
        if st.view:
            pass
        elif st.tiny and uf is not None and len(st.results) == 1 and not st.op.attrs and not rank0:
            env[f"_U{k}"] = uf
            out = f", out={outs[0]}" if outs[0] != "None" else ""
            lines.append(f"        {res[0]} = _U{k}({', '.join(args)}{out})")
        else:
            env[f"_K{k}"] = st.kernel.fn
            env[f"_A{k}"] = st.op.kernel_attrs()
            out = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"
            call = f"_K{k}({', '.join(args + ['out=' + out, '**_A' + str(k)])})"
            if len(res) == 1:
                lines.append(f"        {res[0]} = {call}")
            else:
                lines.append(f"        {', '.join(res)}, = {call}")
        for v in st.free_after:
            donated = any(st.operands[i] == v for i in st.inplace.values())
            # the pool keeps only what the plan says it can hold without raising the peak (``Plan.recycle``)
            if not st.tiny and not donated and v not in inputs and (plan.recycle is None or v in plan.recycle):
                lines.append(f"        _G({local[v]})")
            lines.append(f"        del {local[v]}")
    ret = ", ".join(f"{v!r}: {local[v]}" for v in dict.fromkeys(plan.live_outputs))
    lines.append(f"        return {{{ret}}}")
    lines.append("    except BaseException as _e:")
    lines.append("        _R._fail(_s, _e)")
    src = "\n".join(lines) + "\n"
    code = builtins.compile(src, "<gradir straight-line plan>", "exec")
    exec(code, env)
    return env["_run"]


_EXECUTORS: dict[int, ThreadPoolExecutor] = {}
_EXEC_LOCK = threading.Lock()


_SWITCH_LOCK = threading.Lock()
_switch_users = 0
_switch_saved = 0.0


class _short_switch_interval:
    """Lower the GIL switch interval while any dataflow run is active (counted, so runs
    that overlap in several threads restore the process's own value exactly once)."""

    def __enter__(self) -> None:
        global _switch_users, _switch_saved
        with _SWITCH_LOCK:
            if _switch_users == 0:
                _switch_saved = sys.getswitchinterval()
                sys.setswitchinterval(min(_switch_saved, SWITCH_INTERVAL))
            _switch_users += 1

    def __exit__(self, *exc: object) -> None:
        global _switch_users
        with _SWITCH_LOCK:
            _switch_users -= 1
            if _switch_users == 0:
                sys.setswitchinterval(_switch_saved)


def _executor(threads: int) -> ThreadPoolExecutor:
    with _EXEC_LOCK:
        ex = _EXECUTORS.get(threads)
        if ex is None:
            ex = _EXECUTORS[threads] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gradir",
                                                          initializer=parallel.unpinned_thread)
        return ex

