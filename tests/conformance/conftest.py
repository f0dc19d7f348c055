"""The conformance suite's fixtures and its adapters: every registered op x every concern.

User ops.  ``GRADIR_OPS=a.py:b.py python -m pytest tests/conformance`` loads the op files first
(``gradir.load_ops`` when gradir has it, else each file imported as a module), so every op they
define is checked by every concern, as the built-in ones are (docs/conformance.md).

Adapters.  Every lookup of an op's place (its kernel, gradient rule, placement rule, ONNX mapping,
docs entry, fusion) goes through the small functions below, so that a change of where gradir keeps
one of them is adapted here, once, and the concerns in ``test_ops.py`` stay as they are.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import pytest

import gradir
from gradir import OPS, Graph, GraphInput, Op
from gradir.ir.types import DType, TensorType

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS_ENV = "GRADIR_OPS"


# -- user ops ---------------------------------------------------------------------------------------
def load_user_ops(spec: Optional[str] = None) -> list[str]:
    """Load the op files named in ``spec`` (default: ``$GRADIR_OPS``, separated by ``os.pathsep``);
    return the names of the ops they registered."""
    spec = os.environ.get(OPS_ENV, "") if spec is None else spec
    before = set(OPS)
    for path in filter(None, spec.split(os.pathsep)):
        loader = getattr(gradir, "load_ops", None)
        if loader is not None:
            loader(path)
            continue
        name = "gradir_user_ops_" + re.sub(r"\W", "_", os.path.abspath(path))
        if name in sys.modules:
            continue
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise pytest.UsageError(f"{OPS_ENV}: cannot load {path!r} (not a Python file?)")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    return sorted(set(OPS) - before)


# At import, before collection: the parametrized tests are collected over OPS after this.  (Should gradir
# itself come to read GRADIR_OPS when imported, load_ops must then accept a file it has already loaded.)
USER_OPS = load_user_ops()
ALL_OPS = sorted(OPS)


@pytest.fixture(scope="session")
def user_ops() -> list[str]:
    """The ops the files of ``GRADIR_OPS`` registered (loaded when this conftest is imported)."""
    return list(USER_OPS)


def op_names(select: Callable[[type[Op]], bool] = lambda cls: True) -> list[str]:
    return [n for n in ALL_OPS if select(OPS[n])]


def is_builtin(cls: type[Op]) -> bool:
    return cls.__module__.startswith("gradir.")


# -- adapters: where gradir keeps each place of an op ----------------------------------------------------
def kernel_of(cls: type[Op]) -> Any:
    """The op's CPU kernel (``KernelInfo``: ``fn``, ``inplace``), or None."""
    from gradir.backends.cpu.kernels import get_kernel
    from gradir.ops import CompositeOp
    if issubclass(cls, CompositeOp):
        return CompositeKernel(cls)  # its kernel is its decomposition, compiled
    return get_kernel(cls)


def graph_inputs(arrays: Any) -> tuple[list, list, dict]:
    """A one-op graph's inputs for ``arrays`` (t0, t1, ...; ``None`` an omitted operand): the inputs, the
    op's operands, the feed."""
    inputs: list = []
    operands: list = []
    feed: dict = {}
    for a in arrays:
        if a is None:
            operands.append(None)
            continue
        v = f"t{len(inputs)}"
        inputs.append(GraphInput(v, TensorType(DType.from_numpy(a.dtype), a.shape)))
        operands.append(v)
        feed[v] = a
    return inputs, operands, feed


@dataclass
class CompositeKernel:
    """A composite op's kernel as the CPU backend runs it: a one-op graph, compiled (``compile`` expands
    the op into its decomposition), run on the operands (docs/extending.md)."""

    cls: type
    inplace: bool = False
    blas: bool = False

    def fn(self, *arrays: Any, out: Any = None, **attrs: Any) -> Any:
        inputs, operands, feed = graph_inputs(arrays)
        n = self.cls.num_results(self.cls(["t0"], operands, attrs).resolved_attrs())
        results = [f"t{len(inputs) + k}" for k in range(n)]
        graph = Graph(inputs, [self.cls(results, operands, attrs)], results).validate()
        got = gradir.compile(graph).run(feed)
        res = [got[r] for r in results]
        return res[0] if n == 1 else tuple(res)


def grad_rule_of(cls: type[Op]) -> Any:
    """The op's gradient rule, or None (a backward op needs none)."""
    from gradir.autodiff.gradrules import gradient_rule
    return gradient_rule(cls)


def placement_of(cls: type[Op]) -> Any:
    """The op's sharding placement rule, or None."""
    from gradir.errors import ShardError
    from gradir.distributed.rules import RULES, placement_rule
    from gradir.ops import CompositeOp
    if issubclass(cls, CompositeOp):
        return "its decomposition's"  # ``shard`` expands it first: its primitives are placed
    try:
        return RULES.get(placement_rule(cls))
    except ShardError:
        return None


def can_fuse(op: Op, types: dict) -> bool:
    """Whether the backend may make ``op`` a member of a fused element-wise loop."""
    from gradir.transforms.passes.elementwise import fusable
    return fusable(op, types)


def neighbour_op(dtype: DType) -> str:
    """An element-wise op that reads a result of ``dtype`` (the fusion concern's neighbour): Neg for a number,
    Identity for a Bool (Neg takes no Bool)."""
    return "Identity" if dtype == DType.Bool else "Neg"


def fuse_small_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuse groups of any size (the examples are small)."""
    from gradir.transforms.passes import elementwise
    monkeypatch.setattr(elementwise, "MIN_ELEMENTS", 1)


def fused_members(exe: Any) -> list[list[str]]:
    """The op names of each fused loop of a compiled graph."""
    from gradir.ops.fused import FusedElementwiseOp
    return [[m.op_name for m in st.op.members] for st in exe.plan.steps if isinstance(st.op, FusedElementwiseOp)]


def split_rows_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels that split their rows over threads do so even for the examples' few bytes."""
    from gradir.backends.cpu.kernels import parallel
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 1)


def on_threads(n: int) -> Any:
    """``with on_threads(n):`` a kernel called here may use ``n`` threads."""
    from gradir.backends.cpu.kernels import parallel
    return parallel.cores(n)


def export_one(graph: Graph, custom_domain: bool) -> Any:
    """The graph as an ONNX model (``onnx.ModelProto``)."""
    return gradir.export_onnx(graph, custom_domain=custom_domain)


def import_one(model: Any) -> Any:
    """An ONNX model back as gradir's ``ImportedModel`` (``.graph``, ``.inputs``)."""
    return gradir.import_onnx(model.SerializeToString())


def onnx_domains(model: Any) -> set[str]:
    return {n.domain for n in model.graph.node}


def onnx_no_counterpart_reason(cls: type[Op]) -> Optional[str]:
    """Where the docs say the op has no ONNX or ORT counterpart (docs/onnx.md, Export), or None: an op
    without one exports only in the ``ai.gradir`` domain.  A user op needs no reason (its ONNX form is
    the ``ai.gradir`` op itself)."""
    if not is_builtin(cls):
        return "a user op: exported in the ai.gradir domain"
    if cls.__dict__.get("NO_ONNX"):
        return cls.__dict__["NO_ONNX"]
    with open(os.path.join(ROOT, "docs", "onnx.md"), encoding="utf-8") as f:
        text = f.read()
    for para in text.split("\n- "):
        if "no ONNX or ORT counterpart" in para and re.search(rf"`{re.escape(cls.op_name)}`", para):
            return " ".join(para.split())
    return None


def onnx_comes_back_as(cls: type[Op]) -> Optional[str]:
    """What docs/onnx.md says an exported op is imported as when that is not the op itself (``a
    `ReduceSumTo` as `ReduceSum` + `Reshape```), or None."""
    from gradir.ops import CompositeOp
    if issubclass(cls, CompositeOp):
        return "its decomposition (a composite op exports as its primitives: docs/extending.md)"
    with open(os.path.join(ROOT, "docs", "onnx.md"), encoding="utf-8") as f:
        text = " ".join(f.read().split())
    m = re.search(rf"`{re.escape(cls.op_name)}` (?:comes? back )?as ([^,;.]+)", text)
    return m.group(0) if m else None


def docs_entry(cls: type[Op]) -> Optional[str]:
    """The op's section of docs/ops.md (a built-in op) or of ``gradir ops NAME`` (a user op), or None."""
    if not is_builtin(cls):
        from gradir.tools.docs import ops_text
        text = ops_text([cls.op_name])
        return text if f"  {cls.op_name}" in text else None
    with open(os.path.join(ROOT, "docs", "ops.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(rf"^### `{re.escape(cls.op_name)}`.*?(?=^##|\Z)", text, re.S | re.M)
    return m.group(0) if m else None


def docs_generated(cls: type[Op]) -> str:
    """What the docs generator writes for the op now (its section of ``gradir ops --markdown``)."""
    from gradir.tools.docs import ops_markdown
    text = ops_markdown([cls.op_name])
    m = re.search(rf"^### `{re.escape(cls.op_name)}`.*?(?=^##|\Z)", text, re.S | re.M)
    return m.group(0) if m else text


# -- one example instance of an op --------------------------------------------------------------------
DTYPES = {np.float32: DType.Float32, np.float64: DType.Float64}
SEED = 30


@dataclass
class Case:
    """An op's example as a graph: ``graph`` reads inputs t0.. (one per given operand) and outputs
    every result; ``arrays`` are the operands (``None`` for an omitted one), ``attrs`` every attribute."""

    cls: type[Op]
    dtype: Any
    arrays: list[Optional[np.ndarray]]
    attrs: dict[str, Any]
    graph: Graph
    op: Op
    inputs: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.cls.op_name

    def reference(self) -> list[np.ndarray]:
        ref = self.cls.reference(*self.arrays, **self.attrs)
        return [np.asarray(r) for r in (ref if isinstance(ref, (tuple, list)) else (ref,))]


def fail(cls: type[Op], concern: str, message: str) -> None:
    """Fail naming the op and the concern: ``Softsign: kernel: ...``."""
    pytest.fail(f"{cls.op_name}: {concern}: {message}", pytrace=False)


def concern(name: str) -> Callable:
    """Decorate ``check(cls, ...)``: an exception it raises (a gradir error where the op lacks a place, a
    crash) fails naming the op and the concern ``name``, as its own checks do."""
    def wrap(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(cls: type[Op], *args: Any, **kwargs: Any) -> Any:
            try:
                return check(cls, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 - reported below, outside the handler (no chained trace)
                error = e
            fail(cls, name, f"{type(error).__name__}: {error}")
        return run
    return wrap


def make_case(cls: type[Op], dtype: Any = np.float64, seed: int = SEED, concern: str = "example") -> Case:
    """The op's example (``Op.example``) as a validated one-op graph."""
    rng = np.random.default_rng(seed)
    try:
        arrays, attrs = cls.example(rng, dtype)
    except NotImplementedError as e:
        fail(cls, concern, f"no example: {e}")
    arrays = [None if a is None else np.asarray(a) for a in arrays]
    inputs, operands, feed = graph_inputs(arrays)
    probe = cls(["t0"], operands, attrs)
    n = cls.num_results(probe.resolved_attrs())
    results = [f"t{len(inputs) + k}" for k in range(n)]
    declared = None
    if cls.DECLARED_TYPE:  # the result types are part of the op: the reference's shapes, in ``dtype``
        ref = cls.reference(*arrays, **probe.resolved_attrs())
        ref = ref if isinstance(ref, (tuple, list)) else (ref,)
        declared = [TensorType(DTYPES[dtype], np.shape(r)) for r in ref]
    op = cls(results, operands, attrs, declared)
    try:
        graph = Graph(inputs, [op], list(results), name=f"{cls.op_name.lower()}_example").validate()
    except gradir.GradirError as e:
        fail(cls, "type rule", f"the example does not type-check: {e}")
    except Exception as e:  # noqa: BLE001 - a type rule that crashes is named as one
        fail(cls, "type rule", f"checking the example raises {type(e).__name__}: {e}")
    return Case(cls, dtype, arrays, dict(graph.ops[0].attrs), graph, graph.ops[0], feed)


@pytest.fixture(params=[np.float32, np.float64], ids=["Float32", "Float64"])
def dtype(request: pytest.FixtureRequest) -> Any:
    return request.param
