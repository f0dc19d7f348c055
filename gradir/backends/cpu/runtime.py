"""Compiling and running graphs: ``compile``, and ``Executable`` with its input checks (the
executors, buffer reuse, tracing and numerics checks are in ``gradir.backends.cpu.executor``).

``compile(graph)`` validates, runs the passes and builds the plan once;
``Executable.run(inputs)`` may then be called many times.  With one thread the
steps run in schedule order on the caller's thread.  With more, an op starts as
soon as its operands are ready: the caller's thread dispatches, runs tiny ops
inline and hands the rest to a pool.  Kernels are deterministic and each op
computes the same thing whatever ran beside it, so results are bit-for-bit
identical for every thread count.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Mapping, Optional, Union

import numpy as np

from . import kernels  # noqa: F401  (importing the package registers every kernel family)
from ..base import get_backend, register_backend
from ...errors import ArgumentError, Diagnostic, InputError, shown
from .buffers import BufferPool
from .executor import Run, describe, dtype_name, straight_line_code
from ...ir.graph import Graph, GraphInput
from ...ops.composite import expand_composites
from ...transforms.passes.pipeline import Program, run_passes
from ...transforms.schedule import Plan, build_plan
from ...ir.types import TensorType, format_shape

__all__ = ["compile", "Executable", "default_threads", "check_threads"]


def default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, 2))


def compile(graph_or_text: Union[Graph, str, "os.PathLike[str]"], threads: Optional[int] = None, *,
            passes: Optional[list[str]] = None, disable: Optional[list[str]] = None,
            filename: str = "<string>", backend: str = "cpu", memory_budget: object = None) -> "Executable":
    """Validate, optimize and plan a graph; returns an ``Executable``.

    ``graph_or_text`` is a ``Graph``, IR text, or the path of a ``.gir`` file (a
    ``pathlib.Path``, or a one-line string naming a file that exists: that is loaded
    as by ``gradir.load``, never parsed as IR).  ``threads`` (default: the number of
    cores, at most 2) bounds the worker threads.  ``passes``/``disable`` choose the
    compiler passes (see ``gradir.transforms.passes.pipeline.PASSES``; a comma-separated string works too).
    ``backend`` names what runs the schedule (``gradir.backends.base``: ``"cpu"``, the thread-pool
    executor, or ``"reference"``, one step after another).  ``memory_budget`` (bytes, a size such as
    ``"512MiB"`` or ``"2GB"``, or ``"auto"``) bounds the planned peak: the plan recomputes values to meet
    it, with the same bits (docs/memory.md), or raises ``CompileError`` naming the least feasible budget;
    ``plan.memory`` says what it decided.  Bad arguments raise ``gradir.ArgumentError``.
    """
    from ...transforms.memory.budget import parse_budget
    memory_budget = parse_budget(memory_budget)
    from ...text.syntax import load, names_a_file, parse
    check_threads(threads)
    passes = pass_list(passes, "passes")
    disable = pass_list(disable, "disable")
    if isinstance(graph_or_text, os.PathLike):
        graph = load(graph_or_text)
    elif isinstance(graph_or_text, str):
        if names_a_file(graph_or_text):
            graph = load(graph_or_text)
        else:
            graph = parse(graph_or_text, filename)
    elif isinstance(graph_or_text, Graph):
        graph = graph_or_text
        if not graph.validated:
            graph.validate()
    else:
        raise ArgumentError(f"compile() takes a Graph, IR text or a path, not {type(graph_or_text).__name__}")
    lower = get_backend(backend)
    from ...text.syntax import no_gc
    with no_gc():  # millions of small acyclic objects: the cyclic GC only slows this down
        program = Program(expand_composites(graph), lower)  # the passes see a composite op's primitives
        log = run_passes(program, passes, disable)
        if memory_budget is None:
            plan = build_plan(program, log, lower.kernels)
        else:
            from ...transforms.memory.planner import plan_with_budget
            plan = plan_with_budget(program, log, lower.kernels, memory_budget)
    return lower.lower(graph, program, plan, threads)


# More worker threads than this only costs memory (each has a stack) and start-up time; a graph's
# parallelism and the machine's cores are far below it.
MAX_THREADS = 1024


def check_threads(threads: object) -> None:
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ArgumentError(f"threads must be a positive integer or None, got {shown(threads)}")
    if threads is not None and threads > MAX_THREADS:
        raise ArgumentError(f"threads must be at most {MAX_THREADS}, got {shown(threads)}")


def pass_list(names: object, what: str) -> Optional[list[str]]:
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


def warm_kernels(plan: Plan) -> None:
    """Build the compiled kernels this plan will call (see ``gradir.backends.cpu.kernels``), so that no
    run pays for compiling them; with numba's disk cache warm, this only loads them."""
    seen: set[tuple[str, Any]] = set()
    for st in plan.steps:
        if st.kernel.prepare is not None:
            st.kernel.prepare(st.op, plan.types)
        if st.kernel.warm is None:
            continue
        t = plan.types.get(st.results[0])
        if t is None:
            continue
        key = (st.kernel.op or st.kernel.name, t.dtype.numpy)
        if key not in seen:
            seen.add(key)
            st.kernel.warm(t.dtype.numpy)


class Executable:
    """A compiled graph: ``run(inputs)`` / ``exe(**inputs)`` -> dict of outputs."""

    def __init__(self, graph: Graph, program: Program, plan: Plan, threads: Optional[int]) -> None:
        self.graph = graph
        self.program = program
        self.plan = plan
        check_threads(threads)
        self.threads = default_threads() if threads is None else threads
        self._input_types = {i.name: i.type for i in graph.inputs}
        from ...ir.labels import output_keys
        self._labelled = any(i.label is not None for i in graph.inputs)
        self.output_keys = output_keys(graph)  # how run() keys each output: its label, else its name
        self._output_aliases = {n: k for n, k in zip(graph.outputs, self.output_keys) if n != k}
        # (name, NumPy dtype, shape) of the inputs whose shape is fully known: the common case
        # of check_inputs, checked without building any message
        self._static_inputs = [(i.name, i.type.dtype.numpy, tuple(i.type.shape)) for i in graph.inputs
                               if None not in i.type.shape]
        self._pool = BufferPool()
        self._shape_cache: dict[tuple, dict[str, TensorType]] = {}
        self._lock = threading.Lock()

    def _straight_line(self):
        """The schedule as one generated Python function (torch.fx style): each
        step a direct call, values in locals, ``del`` after the last use.  Tiny
        ops with an exact ufunc call it directly; large results come from and go
        back to the buffer pool."""
        fn = getattr(self, "_codegen_fn", None)
        if fn is None:
            fn = self._codegen_fn = straight_line_code(self.plan, self._pool)
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
        if self._labelled:
            from ...ir.labels import inputs_by_name
            inputs = inputs_by_name(self.graph, inputs, self._file)
        if len(inputs) == len(self._static_inputs) == len(self.input_names):
            arrays = {}
            for name, dt, shape in self._static_inputs:
                a = inputs.get(name)
                if type(a) is not np.ndarray or a.dtype != dt or a.shape != shape or 0 in shape:
                    break
                arrays[name] = a if a.flags.c_contiguous else np.array(a, order="C")
            else:
                return arrays, self._concrete_types(arrays)
        problems: list[tuple[Union[str, Diagnostic], Optional[str]]] = []  # (message, input it is about)
        missing = [n for n in self.input_names if n not in inputs]
        unexpected = [n for n in inputs if n not in self._input_types]
        from ...ir.labels import label_text
        shown = {i.name: i.name + label_text(i.label) for i in self.graph.inputs}
        for n in missing:
            problems.append((f"missing input {shown[n]} ({self._input_types[n]})", n))
        if unexpected:
            from ...text.names import computed_values, name_list
            computed = computed_values(self.graph)
            listed = name_list([shown[n] for n in self.input_names])
            for k, n in enumerate(unexpected):  # close matches for the first few keys (a big archive's are slow)
                problems.append((self._unexpected(n, shown, computed, listed, suggest=k < 8), None))
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
                problems.append((f"input {name}: expected {want}, got {describe(a)} (dtype "
                                 f"{dtype_name(a.dtype)} instead of {want.dtype})", name))
                continue
            if a.ndim != want.rank:
                problems.append((f"input {name}: expected {want}, got {describe(a)} (rank {a.ndim} instead of "
                                 f"{want.rank})",
                                 name))
                continue
            bad = [k for k, (d, w) in enumerate(zip(a.shape, want.shape)) if w is not None and d != w]
            if bad or 0 in a.shape:
                k = bad[0] if bad else a.shape.index(0)
                problems.append((f"input {name}: expected {want}, got {describe(a)} (dimension {k} is "
                                 f"{a.shape[k]})",
                                 name))
                continue
            arrays[name] = a if a.flags.c_contiguous else np.array(a, order="C")
        if problems:
            spans = {i.name: i.span for i in self.graph.inputs}
            src = self.graph.source
            raise InputError([msg if isinstance(msg, Diagnostic) else
                              Diagnostic(msg, spans.get(n) if n else None, src if n and spans.get(n) else None,
                                         filename=self._file) for msg, n in problems])
        return arrays, self._concrete_types(arrays)

    def _unexpected(self, key: Any, shown: Mapping[str, str], computed: dict, listed: str,
                    suggest: bool = True) -> Union[str, Diagnostic]:
        """Why ``key`` is not an input: a value the graph computes is pointed at where it is computed; for any
        other key, the inputs it may have meant (close matches, then ``listed``: at most ``SHOWN_NAMES`` inputs)."""
        from ...text.names import close_matches, computed_diagnostic, did_you_mean
        hint = ""
        if isinstance(key, str):
            located = computed_diagnostic(self.graph, key, f"unexpected input {key}",
                                          " and cannot be given as an input", computed)
            if located is not None:
                located.filename = self._file
                return located
            if suggest:
                keys = {i.name: shown[i.name] for i in self.graph.inputs}
                keys.update((i.label, shown[i.name]) for i in self.graph.inputs if i.label is not None)
                hint = did_you_mean(list(dict.fromkeys(keys[m] for m in close_matches(key, list(keys)))))
        return f"unexpected input {key} ({hint + ' ' if hint else ''}the graph's inputs are {listed})"

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
        g = Graph(inputs, [op.untyped() for op in self.program.ops], self.program.live_outputs,
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
        """Run the graph; returns ``{output key: array}`` in output order.

        ``inputs`` are keyed by each input's label or by its value name (``tN``); an
        output's key is its label where it has one, else its value name (as in the
        ``.npz`` that ``gradir run -o`` writes; see ``output_keys``).  Indexing the
        result by a labelled output's value name works too (``res["t7"]``), though
        iteration, ``in`` and ``get`` see only the keys.

        ``check_numerics`` stops at the first op that produces NaN or Inf.
        ``trace``, if a list, receives one Chrome trace event per op.
        """
        if trace is not None and not isinstance(trace, list):
            raise ArgumentError(f"trace must be a list (it receives one event per op) or None, "
                                f"got {type(trace).__name__}")
        arrays, types = self.check_inputs(inputs)
        if check_numerics:
            self._check_input_numerics(arrays)
        self._pool.reclaim()  # the outputs of earlier runs that nobody holds any more
        run = Run(self, arrays, types, check_numerics, trace)
        values = run.execute()
        del run
        out = self.keyed_outputs(values)
        recycle = self.plan.recycle  # outputs the pool may take back without raising the peak
        self._pool.lend(values[v] for v in self.plan.live_outputs if recycle is None or v in recycle)
        del values
        return out

    def keyed_outputs(self, values: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The outputs among ``values`` (by value name), keyed as ``run`` returns them."""
        if not self._output_aliases:
            out = {}
        else:
            from ...ir.labels import Outputs
            out = Outputs(self._output_aliases)
        for key, name in zip(self.output_keys, self.plan.outputs):
            v = self.program.resolve(name)
            out[key] = values[v]
        return out


class _Cpu:
    """The default backend: the thread-pool executor (``Executable``)."""

    name = "cpu"

    kernels = "cpu"

    def kernel_info(self, op_cls: type) -> Any:
        """``op_cls``'s kernel (``gradir.backends.cpu.kernels.KernelInfo``), generated from its formula if need be."""
        return kernels.get_kernel(op_cls, self.kernels)

    def fusion(self) -> Any:
        """What the fused loops can take (``gradir.backends.cpu.kernels.fused``)."""
        return kernels.KERNELS.fusion

    def lower(self, graph: Graph, program: Program, plan: Plan, threads: Optional[int]) -> Executable:
        warm_kernels(plan)
        return Executable(graph, program, plan, threads)


register_backend(_Cpu())
