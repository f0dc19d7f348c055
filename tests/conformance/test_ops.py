"""Every registered op (user ops included: ``GRADIR_OPS``, see conftest.py) x every concern, on the op's
own example (``Op.example``) against its float64 reference (``Op.reference``):

* type rule: the example's types infer (the reference's shapes); a wrong dtype or rank is a located error;
* kernel: the reference's numbers in both dtypes, on the compiled and the NumPy path; in place where the
  kernel says so; the same bits on 1 and 2 threads; operands left as they were;
* gradient (forward ops): the derived gradient against float64 finite differences (``gradir.gradcheck``);
* fusion (element-wise ops): fused with a neighbour, the unfused bits;
* sharding: 1, 2 and 4 shards against the unsharded run (the inline path);
* ONNX: export and import give the op and its bits back (or docs/onnx.md says why it has no counterpart);
* docs: docs/ops.md lists it as the registry generates it.

Each check fails as ``<Op>: <concern>: <what>``.  ``check_*`` are plain functions, so that
``test_the_suite_names_missing_places.py`` can show a place taken away is named.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import gradir
from gradir import OPS, Graph, GraphInput, Op
from gradir.errors import AutodiffError, GradirError, OnnxError, ShardError

from .conftest import (can_fuse, concern, docs_entry, docs_generated, export_one, fail, fuse_small_groups, fused_members,
                       grad_rule_of, import_one, is_builtin, kernel_of, make_case, neighbour_op, on_threads,
                       onnx_domains, onnx_comes_back_as, onnx_no_counterpart_reason, op_names, placement_of,
                       split_rows_always)

# |got - reference| / max(1, |reference|) at most this, by dtype (the reference is exact float64)
TOLERANCE = {np.float32: 2e-5, np.float64: 1e-12}
SHARDS = (1, 2, 4)


def _bits(a: Any) -> bytes:
    """The bits, every NaN counted the same (compiled code keeps neither a NaN's sign nor its payload)."""
    a = np.array(a)
    if a.dtype.kind == "f":
        a[np.isnan(a)] = np.nan
    return a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()


def _as_list(res: Any) -> list:
    return list(res) if isinstance(res, (tuple, list)) else [res]


def _close(got: np.ndarray, want: np.ndarray, tol: float) -> str | None:
    """Why ``got`` is not ``want`` within ``tol`` (relative to max(1, |want|)), or None."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape}, reference {want.shape}"
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return f"NaN where the reference has none (or the reverse): {got} vs {want}"
    ok = ~np.isnan(want)
    if not ok.any():
        return None
    err = float(np.max(np.abs(got[ok] - want[ok]))) / max(1.0, float(np.max(np.abs(want[ok]))))
    return None if err <= tol else f"off by {err:.3g} (relative; tolerance {tol:g})"


# -- type rule ------------------------------------------------------------------------------------------
def _text(inputs: list[GraphInput], op: Op) -> tuple[str, int]:
    """A graph's text: the inputs, the op without result types, its results as outputs; the op's line."""
    lines = [f"input {i.name} : {i.type}" for i in inputs]
    lines.append(op.to_string().rsplit(" : ", 1)[0] if op.result_types else op.to_string())
    lines.append(f"output {', '.join(op.results)}")
    return "\n".join(lines) + "\n", len(inputs) + 1


def _wrong(t: Any) -> list[tuple[str, Any]]:
    """Types an operand of type ``t`` may not have: another dtype, one rank more, one rank less."""
    from gradir.ir.types import DType
    out = [(f"dtype {d}", t.with_dtype(d)) for d in (DType.Bool, DType.Int32) if d != t.dtype]
    out.append(("one rank more", t.with_shape((7,) + tuple(t.shape))))
    if t.rank:
        out.append(("one rank less", t.with_shape(tuple(t.shape)[1:])))
    return out


@concern("type rule")
def check_type_rule(cls: type[Op]) -> None:
    case = make_case(cls, np.float32, concern="type rule")
    got = [case.graph.types[r] for r in case.op.results]
    ref = case.reference()
    if len(ref) != len(got):
        fail(cls, "type rule", f"{len(got)} results, but the reference gives {len(ref)}")
    for r, t, want in zip(case.op.results, got, ref):
        if tuple(t.shape) != np.shape(want):
            fail(cls, "type rule", f"result {r} is inferred as {t}, but the reference has shape {np.shape(want)}")
    rejected = 0
    for k, i in enumerate(case.graph.inputs):
        for what, t in _wrong(i.type):
            inputs = [GraphInput(j.name, t if j is i else j.type) for j in case.graph.inputs]
            text, line = _text(inputs, case.op.copy(result_types=None) if not cls.DECLARED_TYPE else case.op)
            try:
                gradir.parse(text, "example.gir")
            except GradirError as e:
                rejected += 1
                if not re.match(rf"example\.gir:{line}:\d+: error: ", str(e)):
                    fail(cls, "type rule", f"operand {k} with {what} ({t}): the error is not located at the op's "
                                           f"line {line}: {e}")
            except Exception as e:  # noqa: BLE001 - the point: a type rule never raises anything else
                fail(cls, "type rule", f"operand {k} with {what} ({t}) raises {type(e).__name__}: {e}, not a "
                                       "located error")
    if case.graph.inputs and not rejected and cls.ELEMENTWISE is None and not cls.SHAPE_ONLY:
        # an op that computes (not element by element, not a view) reads its operands by rank and dtype
        fail(cls, "type rule", "accepts every wrong dtype and rank of every operand")


@pytest.mark.parametrize("name", op_names())
def test_type_rule(name: str) -> None:
    check_type_rule(OPS[name])


# -- kernel ------------------------------------------------------------------------------------------------
@concern("kernel")
def check_kernel(cls: type[Op], dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    k = kernel_of(cls)
    if k is None:
        fail(cls, "kernel", "no kernel is registered for it (@kernel in gradir/backends/cpu/kernels/, or a FORMULA)")
    case = make_case(cls, dtype, concern="kernel")
    kw = case.op.kernel_attrs()
    n = len(case.op.results)

    def call(args: list, out: Any = None, threads: int = 1) -> list:
        with on_threads(threads), np.errstate(all="ignore"):
            return [np.asarray(r) for r in _as_list(k.fn(*args, out=out if n == 1 else (out or (None,) * n), **kw))]

    before = [None if a is None else a.copy() for a in case.arrays]
    got = call(case.arrays)
    for a, b in zip(case.arrays, before):
        if a is not None and _bits(a) != _bits(b):
            fail(cls, "kernel", "it wrote into an operand (without being given it as out)")
    types = [case.graph.types[r] for r in case.op.results]
    for r, t, g, want in zip(case.op.results, types, got, case.reference()):
        if g.dtype != t.dtype.numpy or g.shape != tuple(t.shape):
            fail(cls, "kernel", f"result {r} is {g.dtype} {g.shape}, but its type is {t}")
        why = _close(g, want, TOLERANCE[dtype])
        if why:
            fail(cls, "kernel", f"result {r} ({np.dtype(dtype).name}) against the float64 reference: {why}")
    if k.inplace and n == 1:
        for i, a in enumerate(case.arrays):
            if a is None or a.shape != got[0].shape or a.dtype != got[0].dtype:
                continue
            args = [None if b is None else b.copy() for b in case.arrays]
            res = call(args, out=args[i])
            if _bits(args[i]) != _bits(got[0]) or _bits(res[0]) != _bits(got[0]):
                fail(cls, "kernel", f"in place (out = operand {i}) it gives other bits than into a fresh array")
    split_rows_always(monkeypatch)
    for threads in (1, 2):
        if [_bits(g) for g in call(case.arrays, threads=threads)] != [_bits(g) for g in got]:
            fail(cls, "kernel", f"on {threads} thread(s) it gives other bits")


@pytest.mark.parametrize("name", op_names())
def test_kernel(name: str, dtype: Any, kernel_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    check_kernel(OPS[name], dtype, monkeypatch)


# -- gradient ------------------------------------------------------------------------------------------------
def _derivable(case: Any) -> tuple[Graph, list[str]]:
    """The example graph and inputs to differentiate: every result and floating-point input, less those
    the op's rule says take no gradient (a located ``AutodiffError`` naming the value)."""
    from gradir.autodiff.driver import derive
    g = case.graph
    outputs = list(g.outputs)
    wrt = [i.name for i in g.inputs if i.type.dtype.is_float]
    while True:
        graph = Graph(g.inputs, [case.op.copy()], outputs, name=g.name).validate()
        try:
            derive(graph, wrt)
            return graph, wrt
        except AutodiffError as e:
            named = set(re.findall(r"\((t[0-9]+)\)", str(e)))
            keep_out, keep_wrt = [o for o in outputs if o not in named], [w for w in wrt if w not in named]
            if (keep_out, keep_wrt) == (outputs, wrt) or not keep_out or not keep_wrt:
                fail(case.cls, "gradient", f"cannot derive the example: {e}")
            outputs, wrt = keep_out, keep_wrt


@concern("gradient")
def check_gradient(cls: type[Op]) -> None:
    if grad_rule_of(cls) is None:
        fail(cls, "gradient", "no gradient rule (a VJP, or @rule in gradir/autodiff/gradrules.py)")
    case = make_case(cls, np.float64, concern="gradient")
    if not any(i.type.dtype.is_float for i in case.graph.inputs):
        return  # nothing to differentiate (a Constant): its rule is all there is
    graph, wrt = _derivable(case)
    report = gradir.gradcheck(graph, wrt, seed=0, inputs=case.inputs, directions=2)
    if not report.ok:
        fail(cls, "gradient", f"derived gradient against finite differences:\n{report.table()}")


@pytest.mark.parametrize("name", op_names(lambda c: not c.is_backward))
def test_gradient(name: str) -> None:
    check_gradient(OPS[name])


# -- fusion ---------------------------------------------------------------------------------------------------
@concern("fusion")
def check_fusion(cls: type[Op], dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The op and a neighbour reading its result (Neg; Identity for a Bool result): fused where the backend can fuse the op, and the
    bits of the unfused kernels either way."""
    case = make_case(cls, dtype, concern="fusion")
    op = case.op
    y = op.results[0]
    m = len(case.graph.inputs) + len(op.results)
    neg = OPS[neighbour_op(case.graph.types[y].dtype)]([f"t{m}"], [y])
    graph = Graph(case.graph.inputs, [op.copy(), neg], [y, f"t{m}"], name="fusion").validate()
    fuse_small_groups(monkeypatch)
    fused = gradir.compile(graph, disable=["simplify"])
    plain = gradir.compile(graph, disable=["simplify", "fuse-elementwise"])
    if can_fuse(op, graph.types) and not any(cls.op_name in g for g in fused_members(fused)):
        fail(cls, "fusion", f"the backend can fuse it, but the plan leaves it out of the loop: {fused_members(fused)}")
    a, b = fused.run(case.inputs), plain.run(case.inputs)
    for key in b:
        if _bits(a[key]) != _bits(b[key]):
            fail(cls, "fusion", f"fused, {key} has other bits than unfused ({np.dtype(dtype).name})")


@pytest.mark.parametrize("name", op_names(lambda c: c.ELEMENTWISE is not None))
def test_fusion(name: str, dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    check_fusion(OPS[name], dtype, monkeypatch)


# -- sharding -------------------------------------------------------------------------------------------------
def _batches(case: Any) -> list[dict[str, int]]:
    """Splits of the example to try, in order: for each axis of each input of at least ``max(SHARDS)``
    rows, that axis and, in every other input, the first axis of the same size."""
    out: list[dict[str, int]] = []
    inputs = case.graph.inputs
    for i in inputs:
        for n in i.type.shape:
            if n < max(SHARDS):
                continue
            batch = {}
            for j in inputs:
                if n in j.type.shape:
                    batch[j.name] = list(j.type.shape).index(n)
            if batch not in out:
                out.append(batch)
    return out


@concern("sharding")
def check_sharding(cls: type[Op], dtype: Any) -> None:
    if placement_of(cls) is None:
        fail(cls, "sharding", f"no placement rule (SHARDING = {cls.SHARDING!r} names none)")
    case = make_case(cls, dtype, concern="sharding")
    refusals = []
    for batch in _batches(case):
        try:
            sharded = gradir.shard(case.graph, batch)
            break
        except ShardError as e:
            refusals.append(f"{batch}: {e}")
        except Exception as e:  # noqa: BLE001 - a rule that crashes is named as one
            fail(cls, "sharding", f"placing the example split as {batch} raises {type(e).__name__}: {e}")
    else:
        if not case.graph.inputs:
            return  # nothing to split (a Constant): replicated on every shard
        fail(cls, "sharding", "every split of the example refuses:\n" + "\n".join(refusals or ["(no input to split)"]))
    want = gradir.compile(case.graph).run(case.inputs)
    # the bits promise (docs/distributed.md): a split or replicated result has the unsharded bits unless
    # the kernel's arithmetic depends on the sizes it is given (BLAS); a partial sum is within rounding
    size_dependent = bool(getattr(kernel_of(cls), "blas", False))
    for k in SHARDS:
        got = sharded.run(case.inputs, shards=k, client="inline")
        for key in want:
            where = f"{k} shards split as {sharded.batch} ({key} {sharded.placements[key]})"
            why = _close(got[key], want[key], 10 * TOLERANCE[dtype])
            if why or got[key].dtype != want[key].dtype:
                fail(cls, "sharding", f"{where}: {why or got[key].dtype} against the unsharded run")
            if not (sharded.placements[key].is_partial or size_dependent) and _bits(got[key]) != _bits(want[key]):
                fail(cls, "sharding", f"{where}: other bits than the unsharded run")


@pytest.mark.parametrize("name", op_names())
def test_sharding(name: str, dtype: Any) -> None:
    check_sharding(OPS[name], dtype)


# -- ONNX ---------------------------------------------------------------------------------------------------
def _same_attr(a: Any, b: Any, float32: bool) -> bool:
    """An attribute as written and as imported: equal, or a float equal as the float32 a Float32 op
    computes with (ONNX's float attributes are float32), or a shape whose -1 is resolved."""
    if a == b:
        return True
    if isinstance(a, float) and isinstance(b, float):
        return float32 and np.float32(a) == np.float32(b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        return all(x == y or x == -1 for x, y in zip(a, b))
    return False


def _same_attrs(op: Op, back: Op) -> bool:
    float32 = bool(op.result_types) and str(op.result_types[0].dtype) == "Float32"
    return all(_same_attr(op.attrs[k], back.attrs.get(k), float32) for k in op.attrs)


@concern("onnx")
def check_onnx(cls: type[Op]) -> None:
    """Export (the standard ONNX/ORT form; the ``ai.gradir`` domain only for an op docs/onnx.md gives no
    counterpart), import, and the op and its bits come back."""
    case = make_case(cls, np.float32, concern="onnx")
    reason = onnx_no_counterpart_reason(cls)
    try:
        model, refused = export_one(case.graph, custom_domain=False), None
    except OnnxError as e:
        model, refused = None, e
    if refused is not None:
        if reason is None:
            fail(cls, "onnx", f"no ONNX export, and docs/onnx.md gives no reason: {refused}")
        model = export_one(case.graph, custom_domain=True)
    elif reason is not None and is_builtin(cls):
        fail(cls, "onnx", f"exports as {sorted(onnx_domains(model))}, but docs/onnx.md says it has no "
                          f"counterpart: {reason}")
    try:
        back = import_one(model)
    except GradirError as e:
        fail(cls, "onnx", f"its export does not import: {e}")
    names = [op.op_name for op in back.graph.ops]
    if cls.op_name not in names and onnx_comes_back_as(cls) is None:
        fail(cls, "onnx", f"the import of its export has no {cls.op_name}: {names}")
    same = [op for op in back.graph.ops if op.op_name == cls.op_name]
    if same and not any(_same_attrs(case.op, op) for op in same):
        fail(cls, "onnx", f"its attributes come back otherwise: {case.op} is imported as {same[0]}")
    want = gradir.compile(case.graph).run(case.inputs)
    got = gradir.compile(back.graph).run({**case.inputs, **back.inputs})
    if sorted(got) != sorted(want):
        fail(cls, "onnx", f"the import's outputs are {sorted(got)}, not {sorted(want)}")
    for key in want:
        if _bits(got[key]) != _bits(want[key]):
            fail(cls, "onnx", f"after export and import, {key} has other bits")


@pytest.mark.parametrize("name", op_names())
def test_onnx_round_trip(name: str) -> None:
    pytest.importorskip("onnx")
    check_onnx(OPS[name])


# -- docs ---------------------------------------------------------------------------------------------------
@concern("docs")
def check_docs(cls: type[Op]) -> None:
    if not (cls.__doc__ or "").strip():
        fail(cls, "docs", "its class has no docstring (the docs show its first line)")
    entry = docs_entry(cls)
    if entry is None:
        fail(cls, "docs", "docs/ops.md has no entry for it: regenerate with gradir ops --markdown > docs/ops.md")
    if is_builtin(cls) and entry.strip() != docs_generated(cls).strip():
        fail(cls, "docs", "its docs/ops.md entry is not what the registry generates: regenerate with "
                          "gradir ops --markdown > docs/ops.md")


@pytest.mark.parametrize("name", op_names())
def test_docs(name: str) -> None:
    check_docs(OPS[name])
