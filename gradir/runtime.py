"""The executor: dataflow over a thread pool, buffer reuse, tracing, numerics checks.

``compile(graph)`` validates, runs the passes and builds the plan once;
``Executable.run(inputs)`` may then be called many times.  With one thread the
steps run in schedule order on the caller's thread.  With more, an op starts as
soon as its operands are ready: the caller's thread dispatches, runs tiny ops
inline and hands the rest to a pool.  Kernels are deterministic and each op
computes the same thing whatever ran beside it, so results are bit-for-bit
identical for every thread count.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Optional, Union

import numpy as np

from .errors import ArgumentError, Diagnostic, ExecutionError, GradirError, InputError, shown
from .ir import Graph, GraphInput
from .kernels import parallel  # importing the package registers every kernel family
from .passes import Program, run_passes
from .schedule import Plan, Step, build_plan
from .types import DType, TensorType, format_shape

__all__ = ["compile", "Executable", "default_threads"]

# GIL switch interval while ops run concurrently (seconds): 0.5 ms gave the best median
# two-thread speed-up here (1.49x vs 1.37x at Python's default 5 ms; 0.1 ms was worse).
SWITCH_INTERVAL = 0.0005
# BLAS threads per op in a graph where two BLAS ops may run at once (two share the cores).
_BLAS_SHARE = max(1, (os.cpu_count() or 1) // 2)

def default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 2))


def compile(graph_or_text: Union[Graph, str, "os.PathLike[str]"], threads: Optional[int] = None, *,
            passes: Optional[list[str]] = None, disable: Optional[list[str]] = None,
            filename: str = "<string>") -> "Executable":
    """Validate, optimize and plan a graph; returns an ``Executable``.

    ``graph_or_text`` is a ``Graph``, IR text, or the path of a ``.gir`` file (a
    ``pathlib.Path``, or a one-line string naming a file that exists: that is loaded
    as by ``gradir.load``, never parsed as IR).  ``threads`` (default: the number of
    cores, at most 2) bounds the worker threads.  ``passes``/``disable`` choose the
    compiler passes (see ``gradir.passes.PASSES``; a comma-separated string works too).
    Bad arguments raise ``gradir.ArgumentError``.
    """
    from .syntax import load, parse
    _check_threads(threads)
    passes = _pass_list(passes, "passes")
    disable = _pass_list(disable, "disable")
    if isinstance(graph_or_text, os.PathLike):
        graph = load(graph_or_text)
    elif isinstance(graph_or_text, str):
        if "\n" not in graph_or_text and graph_or_text.strip() and os.path.isfile(graph_or_text):
            graph = load(graph_or_text)
        else:
            graph = parse(graph_or_text, filename)
    elif isinstance(graph_or_text, Graph):
        graph = graph_or_text
        if not graph.types:
            graph.validate()
    else:
        raise ArgumentError(f"compile() takes a Graph, IR text or a path, not {type(graph_or_text).__name__}")
    from .syntax import _no_gc
    with _no_gc():  # millions of small acyclic objects: the cyclic GC only slows this down
        program = Program(graph)
        log = run_passes(program, passes, disable)
        plan = build_plan(program, log)
    _warm_kernels(plan)
    return Executable(graph, program, plan, threads)


# More worker threads than this only costs memory (each has a stack) and start-up time; a graph's
# parallelism and the machine's cores are far below it.
MAX_THREADS = 1024


def _check_threads(threads: object) -> None:
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ArgumentError(f"threads must be a positive integer or None, got {shown(threads)}")
    if threads is not None and threads > MAX_THREADS:
        raise ArgumentError(f"threads must be at most {MAX_THREADS}, got {shown(threads)}")


def _pass_list(names: object, what: str) -> Optional[list[str]]:
    """``passes``/``disable`` as a list of names (a comma-separated string is split)."""
    if names is None:
        return None
    if isinstance(names, str):
        return [n.strip() for n in names.split(",") if n.strip()]
    try:
        out = list(names)  # type: ignore[call-overload]
    except TypeError:
        raise ArgumentError(f"{what} must be a list of pass names, got {type(names).__name__}") from None
    bad = [n for n in out if not isinstance(n, str)]
    if bad:
        raise ArgumentError(f"{what} must be a list of pass names, got {shown(bad[0])} in it")
    return out


def _warm_kernels(plan: Plan) -> None:
    """Build the compiled kernels this plan will call (see ``gradir.kernels``), so that no
    run pays for compiling them; with numba's disk cache warm, this only loads them."""
    seen: set[tuple[str, Any]] = set()
    for st in plan.steps:
        if st.kernel.warm is None:
            continue
        t = plan.types.get(st.results[0])
        if t is None:
            continue
        key = (st.kernel.name, t.dtype.numpy)
        if key not in seen:
            seen.add(key)
            st.kernel.warm(t.dtype.numpy)


class _Pool:
    """Freed intermediate buffers, reused for later results of the same dtype and shape."""

    def __init__(self) -> None:
        self._free: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()

    def take(self, dtype: np.dtype, shape: tuple) -> Optional[np.ndarray]:
        with self._lock:
            lst = self._free.get((dtype, shape))
            return lst.pop() if lst else None

    def give(self, arr: np.ndarray) -> None:
        if arr.base is not None or not arr.flags.c_contiguous or not arr.flags.writeable:
            return
        with self._lock:
            lst = self._free.setdefault((arr.dtype, arr.shape), [])
            if len(lst) < 4:
                lst.append(arr)


class Executable:
    """A compiled graph: ``run(inputs)`` / ``exe(**inputs)`` -> dict of outputs."""

    def __init__(self, graph: Graph, program: Program, plan: Plan, threads: Optional[int]) -> None:
        self.graph = graph
        self.program = program
        self.plan = plan
        _check_threads(threads)
        self.threads = default_threads() if threads is None else threads
        self._input_types = {i.name: i.type for i in graph.inputs}
        # (name, NumPy dtype, shape) of the inputs whose shape is fully known: the common case
        # of check_inputs, checked without building any message
        self._static_inputs = [(i.name, i.type.dtype.numpy, tuple(i.type.shape)) for i in graph.inputs
                               if None not in i.type.shape]
        self._pool = _Pool()
        self._shape_cache: dict[tuple, dict[str, TensorType]] = {}
        self._lock = threading.Lock()

    def _straight_line(self):
        """The schedule as one generated Python function (torch.fx style): each
        step a direct call, values in locals, ``del`` after the last use.  Tiny
        ops with an exact ufunc call it directly; large results come from and go
        back to the buffer pool."""
        fn = getattr(self, "_codegen_fn", None)
        if fn is None:
            fn = self._codegen_fn = _codegen(self.plan, self._pool)
        return fn

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.graph.inputs]

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.outputs)

    def __repr__(self) -> str:
        return (f"<Executable {self.graph.name or ''} {len(self.plan.steps)} steps, threads={self.threads}, "
                f"inputs={self.input_names}, outputs={self.output_names}>")

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        return self.run(inputs)

    # -- inputs ------------------------------------------------------------
    def check_inputs(self, inputs: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, TensorType]]:
        """Validate run-time inputs; returns C-contiguous arrays and the concrete types of every value."""
        if not isinstance(inputs, Mapping):
            raise InputError(Diagnostic(f"inputs must be a mapping of input names to arrays, got "
                                        f"{type(inputs).__name__}", filename=self._file))
        if len(inputs) == len(self._static_inputs) == len(self.input_names):
            arrays = {}
            for name, dt, shape in self._static_inputs:
                a = inputs.get(name)
                if type(a) is not np.ndarray or a.dtype != dt or a.shape != shape or 0 in shape:
                    break
                arrays[name] = a if a.flags.c_contiguous else np.array(a, order="C")
            else:
                return arrays, self._concrete_types(arrays)
        problems: list[tuple[str, Optional[str]]] = []  # (message, input it is about)
        missing = [n for n in self.input_names if n not in inputs]
        unexpected = [n for n in inputs if n not in self._input_types]
        for n in missing:
            problems.append((f"missing input {n} ({self._input_types[n]})", n))
        if unexpected:
            computed = {r for op in self.graph.ops for r in op.results}
            for n in unexpected:
                why = (f"{n} is computed by the graph, not an input" if n in computed else
                       f"the graph's inputs are {', '.join(self.input_names)}")
                problems.append((f"unexpected input {n} ({why})", None))
        arrays: dict[str, np.ndarray] = {}
        for name in self.input_names:
            if name not in inputs:
                continue
            want = self._input_types[name]
            a = inputs[name]
            if not isinstance(a, np.ndarray):
                try:
                    a = np.asarray(a)
                except (ValueError, TypeError) as e:  # a ragged list, an object NumPy cannot take
                    problems.append((f"input {name}: expected {want}, got a {type(a).__name__} that is not an "
                                     f"array ({str(e).split(chr(10))[0]})", name))
                    continue
            if a.dtype != want.dtype.numpy and a.dtype.newbyteorder("=") == want.dtype.numpy:
                a = a.astype(want.dtype.numpy)  # the same numbers in the other byte order (a big-endian .npy)
            if a.dtype != want.dtype.numpy:
                problems.append((f"input {name}: expected {want}, got {_describe(a)} (dtype "
                                 f"{_dtype_name(a.dtype)} instead of {want.dtype})", name))
                continue
            if a.ndim != want.rank:
                problems.append((f"input {name}: expected {want}, got {_describe(a)} (rank {a.ndim} instead of "
                                 f"{want.rank})",
                                 name))
                continue
            bad = [k for k, (d, w) in enumerate(zip(a.shape, want.shape)) if w is not None and d != w]
            if bad or 0 in a.shape:
                k = bad[0] if bad else a.shape.index(0)
                problems.append((f"input {name}: expected {want}, got {_describe(a)} (dimension {k} is "
                                 f"{a.shape[k]})",
                                 name))
                continue
            arrays[name] = a if a.flags.c_contiguous else np.array(a, order="C")
        if problems:
            spans = {i.name: i.span for i in self.graph.inputs}
            src = self.graph.source
            raise InputError([Diagnostic(msg, spans.get(n) if n else None, src if n and spans.get(n) else None,
                                         filename=self._file) for msg, n in problems])
        return arrays, self._concrete_types(arrays)

    def _check_input_numerics(self, arrays: Mapping[str, np.ndarray]) -> None:
        """--check-numerics: a NaN or Inf in an input is the input's, not the first op's that passes it on."""
        problems = []
        for i in self.graph.inputs:
            a = arrays[i.name]
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                bad = tuple(int(k) for k in np.argwhere(~np.isfinite(a))[0])
                what = "NaN" if np.isnan(a[bad]) else "Inf"
                problems.append(Diagnostic(f"input {i.name} holds {what} at index {list(bad)} (--check-numerics)",
                                           i.span, self.graph.source if i.span else None, filename=self._file))
        if problems:
            raise InputError(problems)

    @property
    def _file(self) -> str:
        return self.graph.source.filename if self.graph.source else "<graph>"

    def _concrete_types(self, arrays: Mapping[str, np.ndarray]) -> dict[str, TensorType]:
        """Every value's type for these input shapes ('?' dims bound); cached per shape signature."""
        if self.plan.static:
            return self.plan.types
        key = tuple(arrays[n].shape for n in self.input_names)
        with self._lock:
            hit = self._shape_cache.get(key)
        if hit is not None:
            return hit
        inputs = [GraphInput(i.name, TensorType(i.type.dtype, arrays[i.name].shape)) for i in self.graph.inputs]
        g = Graph(inputs, [op.copy(result_types=None) for op in self.program.ops], self.program.live_outputs,
                  self.graph.name, self.graph.source)
        diags = g.diagnostics()
        if diags:
            shapes = ", ".join(f"{n} {format_shape(arrays[n].shape)}" for n in self.input_names)
            raise InputError([Diagnostic(f"the input shapes are inconsistent ({shapes}): {d.message}",
                                         d.span, d.source) for d in diags])
        if len(self._shape_cache) < 64:
            with self._lock:
                self._shape_cache[key] = g.types
        return g.types

    # -- running ----------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any], *, check_numerics: bool = False,
            trace: Optional[list] = None) -> dict[str, np.ndarray]:
        """Run the graph; returns ``{output name: array}`` in output order.

        ``check_numerics`` stops at the first op that produces NaN or Inf.
        ``trace``, if a list, receives one Chrome trace event per op.
        """
        if trace is not None and not isinstance(trace, list):
            raise ArgumentError(f"trace must be a list (it receives one event per op) or None, "
                                f"got {type(trace).__name__}")
        arrays, types = self.check_inputs(inputs)
        if check_numerics:
            self._check_input_numerics(arrays)
        run = _Run(self, arrays, types, check_numerics, trace)
        values = run.execute()
        out = {}
        for name in self.plan.outputs:
            v = self.program.resolve(name)
            out[name] = values[v]
        return out


_OOM = "out of memory"


def _exc_text(e: Exception) -> str:
    """A kernel's ValueError is a message for the user; anything else also names its type."""
    if type(e) is ValueError:
        return str(e)
    if isinstance(e, MemoryError):
        return _OOM
    return f"{type(e).__name__}: {e}"


def _dtype_name(dt: np.dtype) -> str:
    """A dtype in words: gradir's name where it has one (``float16``, ``big-endian Int32`` otherwise)."""
    native = dt.newbyteorder("=") if dt.byteorder in "<>" else dt
    try:
        name = DType.from_numpy(native).value
    except ValueError:
        name = native.name
    return f"{'big' if dt.byteorder == '>' else 'little'}-endian {name}" if native != dt else name


def _describe(a: Any) -> str:
    if isinstance(a, _Planned):
        return str(a.type)
    return f"{_dtype_name(a.dtype)} {format_shape(a.shape)}"


class _Planned:
    def __init__(self, t: Optional[TensorType]) -> None:
        self.type = t


class _Run:
    """One execution of a plan."""

    def __init__(self, exe: Executable, arrays: dict, types: dict, check_numerics: bool,
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
    def run_step(self, st: Step, dataflow: bool = False) -> None:
        values = self.values
        args = [None if v is None else values[v] for v in st.operands]
        outs: list[Optional[np.ndarray]] = []
        for j, r in enumerate(st.results):
            if j in st.inplace:
                outs.append(args[st.inplace[j]])
                continue
            t = self.types.get(r)
            outs.append(self.exe._pool.take(t.dtype.numpy, t.shape) if t is not None and t.is_static else None)
        start = time.perf_counter() if self.trace is not None else 0.0
        try:
            if len(st.results) == 1:
                res = st.kernel.fn(*args, out=outs[0], **st.op.attrs)
                res = (res,)
            else:
                res = st.kernel.fn(*args, out=tuple(outs), **st.op.attrs)
        except GradirError:
            raise
        except Exception as e:  # a kernel failed: say where, with the operand shapes
            raise self._error(st, _exc_text(e), args) from e
        if self.trace is not None:
            end = time.perf_counter()
            self.trace.append({"name": st.op.op_name, "cat": "op", "ph": "X", "pid": os.getpid(),
                               "tid": threading.get_ident() % 100000, "ts": (start - self.t0) * 1e6,
                               "dur": (end - start) * 1e6,
                               "args": {"results": ", ".join(st.results),
                                        "line": st.op.loc.line.line if st.op.loc else None}})
        if len(res) != len(st.results):  # pragma: no cover - kernel bug
            raise self._error(st, f"kernel returned {len(res)} results, expected {len(st.results)}", args)
        for r, a, want in zip(st.results, res, outs):
            if not isinstance(a, np.ndarray):  # NumPy returns scalars for rank-0 results
                a = np.asarray(a)
            t = self.types.get(r)
            if t is not None and (a.shape != t.shape if t.is_static else a.ndim != t.rank) or \
                    (t is not None and a.dtype != t.dtype.numpy):
                raise self._error(st, f"kernel produced {_describe(a)} for {r}, expected {t}", args)
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
            for v in set(o for o in st.operands if o is not None):
                self.pending[v] -= 1
                if self.pending[v] == 0 and v not in keep:
                    dead.append(v)
        for v in dead:
            self._free(st, v)

    def _free(self, st: Step, v: str) -> None:
        a = self.values.pop(v, None)
        if a is not None and v not in self.inputs and not any(st.operands[i] == v for i in st.inplace.values()):
            self.exe._pool.give(a)

    def _fail(self, k: int, e: BaseException) -> None:
        """Re-raise an exception from the generated code as a located ExecutionError."""
        if isinstance(e, GradirError) or k < 0 or not isinstance(e, Exception):
            raise e
        st = self.plan.steps[k]
        # operand arrays are gone from the generated function's locals: report their planned types
        args = [_Planned(self.types.get(v)) if v is not None else None for v in st.operands]
        raise self._error(st, _exc_text(e), args) from e

    def _error(self, st: Step, msg: str, args: list, numerics: bool = False) -> ExecutionError:
        """The cause first, then where: ``CAUSE; in Op on line N, operands t2 Float32 [2, 4]``
        (with the source line under it when the graph came from text)."""
        op = st.op
        if msg == _OOM:
            msg = self._oom_message(st)
        shapes = ", ".join(f"{v} {_describe(a)}" for v, a in zip(st.operands, args) if v is not None)
        span = op.loc.results[0] if op.loc and op.loc.results else None
        text = msg + (f"; in {op.op_name} on line {span.line}" if span is not None else f"; in {op.to_string()}")
        if not numerics and shapes:
            text += f", operands {shapes}"
        if span is not None:
            span = type(span)(span.line, span.col, len(op.to_string()) + span.col)
        return ExecutionError(Diagnostic(text, span, self.exe.graph.source if span else None,
                                         filename=self.exe._file))

    def _oom_message(self, st: Step) -> str:
        from .fileio import human_bytes
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
        exe = self.exe
        threads = exe.threads
        # Several BLAS ops may run at once: hold BLAS (process-wide, counted) to a share of the
        # cores.  The share depends on the graph, never on ``threads`` (also with one thread):
        # OpenBLAS's GEMMs round differently for each thread count, and a graph's results are
        # the same bits whatever ``threads`` is.
        blas = parallel.blas_limit(_BLAS_SHARE) if self.plan.blas_concurrency else contextlib.nullcontext()
        prev = parallel.get_threads()
        with blas:
            parallel.set_threads(threads)
            try:
                if self.trace is None and not self.check_numerics and self.types is self.plan.types and (
                        threads <= 1 or not self.plan.heavy_concurrency):
                    self.values = exe._straight_line()(self)  # nothing to overlap: generated straight-line code
                elif threads <= 1 or len(self.plan.steps) < 2:
                    for st in self.plan.steps:
                        self.run_step(st)
                else:
                    # Kernels release the GIL for each of many short ufunc calls; with the default 5 ms
                    # switch interval one worker can starve the other (a GIL convoy, seen in traces).
                    with _short_switch_interval():
                        self._dataflow(threads)
            finally:
                parallel.set_threads(prev)
        return self.values

    def _dataflow(self, threads: int) -> None:
        """Run the steps on ``threads`` workers (this thread and ``threads - 1`` pool threads).

        Each worker takes a ready step, runs it, marks its dependents and takes the next
        one itself: a chain of steps stays on one worker with no hand-over (a thread
        wake-up costs 50-300 us on these VMs).  Tiny ready steps go first (they unblock
        others at once); then the lowest schedule index (memory-friendly, deterministic
        choice).  Never more than ``threads`` steps compute at once.
        """
        steps = self.plan.steps
        n = len(steps)
        waiting = [len(st.deps) for st in steps]
        dependents: list[list[int]] = [[] for _ in steps]
        for st in steps:
            for d in st.deps:
                dependents[d].append(st.index)
        ready = [st.index for st in steps if waiting[st.index] == 0]
        cond = threading.Condition()
        finished = 0
        active = 0
        error: Optional[BaseException] = None

        def take() -> Optional[int]:  # with cond held
            if not ready:
                return None
            ready.sort(reverse=True)  # lowest schedule index last: popped first
            tiny = next((i for i in range(len(ready) - 1, -1, -1) if steps[ready[i]].tiny), None)
            return ready.pop(-1 if tiny is None else tiny)

        def worker() -> None:
            nonlocal finished, active, error
            k: Optional[int] = None
            while True:
                with cond:
                    if k is not None:  # the step just run is done: release its dependents
                        finished += 1
                        active -= 1
                        for d in dependents[k]:
                            waiting[d] -= 1
                            if waiting[d] == 0:
                                ready.append(d)
                        if len(ready) > 1 or finished == n:
                            cond.notify_all()
                    while True:
                        if error is not None or finished == n:
                            cond.notify_all()
                            return
                        k = take()
                        if k is not None:
                            active += 1
                            break
                        if active == 0:  # pragma: no cover - a cycle would be a planner bug
                            error = ExecutionError("internal error: the schedule deadlocked")
                            continue
                        cond.wait()
                try:
                    with np.errstate(all="ignore"), parallel.limit(1 if steps[k].concurrent else threads):
                        self.run_step(steps[k], dataflow=True)
                except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
                    with cond:
                        error = error or e
                        active -= 1
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


def _codegen(plan: Plan, pool: _Pool):
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
        outs = []
        for j, r in enumerate(st.results):
            if j in st.inplace:
                outs.append(args[st.inplace[j]])
            elif not st.tiny and plan.types.get(r) is not None and plan.types[r].is_static:
                t = plan.types[r]
                env[f"_T{k}_{j}"] = (t.dtype.numpy, t.shape)
                outs.append(f"_P(*_T{k}_{j})")
            else:
                outs.append("None")
        uf = st.kernel.ufunc
        rank0 = plan.types.get(st.results[0]) is None or plan.types[st.results[0]].rank == 0
        if st.tiny and uf is not None and len(st.results) == 1 and not st.op.attrs and not rank0:
            env[f"_U{k}"] = uf
            out = f", out={outs[0]}" if outs[0] != "None" else ""
            lines.append(f"        {res[0]} = _U{k}({', '.join(args)}{out})")
        else:
            env[f"_K{k}"] = st.kernel.fn
            env[f"_A{k}"] = st.op.attrs
            out = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"
            call = f"_K{k}({', '.join(args + ['out=' + out, '**_A' + str(k)])})"
            if len(res) == 1:
                lines.append(f"        {res[0]} = {call}")
            else:
                lines.append(f"        {', '.join(res)}, = {call}")
        for v in st.free_after:
            donated = any(st.operands[i] == v for i in st.inplace.values())
            if not st.tiny and not donated and v not in inputs:
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
            ex = _EXECUTORS[threads] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gradir")
        return ex

