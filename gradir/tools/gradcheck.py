"""``gradir gradcheck``: derived gradients against float64 central finite differences.

The check is the dot-product (vector-Jacobian) test that ``torch.autograd.gradcheck(fast_mode=True)``
and ``jax.test_util.check_grads`` use.  For random cotangents ``u_k`` (one per forward output, drawn
once) let ``L(x) = sum_k <u_k, y_k(x)>``; the backward graph run with those cotangents gives
``g_i = dL/dx_i``.  For each requested input ``x_i`` and a few random unit directions ``v``:

* ``ad = <g_i, v>`` (one backward run serves every input and direction);
* ``fd`` = Richardson-extrapolated central differences of ``t -> L(x + t v)`` (``v`` added to
  ``x_i`` only), from steps ``h`` and ``h/2``: ``c(s) = (L(x + s v) - L(x - s v)) / 2s`` and
  ``fd = (4 c(h/2) - c(h)) / 3``, with an O(h^4) error; ``h = 1e-3 * max(1, rms(x_i))``.

The direction passes when ``|fd - ad| <= atol + rtol * |fd|`` (the ``allclose`` rule, the finite
difference as the reference, as in ``torch.autograd.gradcheck``).

Finite differences are only trustworthy where the function is smooth on the segment ``x ± h v``.  A
kink (``Relu`` at 0) on it, or a point where ``L`` is not finite nearby, shows in the five values of
``L`` the estimate uses (Chainer's ``detect_nondifferentiable`` samples the same five points): ``c(h)``
and ``c(h/2)`` disagree (a kink inside the segment), or the left and right three-point slopes do (a
kink at the point: ``D(s) = (L(x+sv) - 2L(x) + L(x-sv)) / s`` is O(s) when smooth but stays at the
slope jump, and ``D(h) - 2 D(h/2)`` is the difference of those slopes).  So
``err = |c(h) - c(h/2)| + |D(h) - 2 D(h/2)| / 2`` estimates how wrong ``fd`` may be.  A direction
fails only when ``fd`` is trustworthy (``2 err`` within the tolerance) and the disagreement exceeds the
tolerance plus ``2 err``.  Otherwise, unless ``fd`` and ``ad`` agree, it is *unresolved*, neither
passed nor failed, and is tried again with a new direction: at steps 10, 100 and 1000 times smaller
(for strong curvature, a domain edge such as Log near 0, a kink near the point), then (for a kink
exactly at the point, which no step avoids) at points shifted by 1e-3 and 1e-2 (times
max(1, rms(x_i))) in every requested input, where the gradient is recomputed.  A direction still
unresolved after that is reported as ``kink``: not verified, and the check does not pass.  Directions
checked at a shifted point are listed under the table.

Everything runs in Float64: a Float32 graph is promoted (its Float32 inputs and Constants become Float64
and every type is inferred again), and Float32 input arrays are widened exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional, Union

import numpy as np

from ..errors import ArgumentError, Diagnostic, GradcheckError, InputError, shown
from ..ir.graph import Graph, GraphInput
from ..ir.op import Op
from ..text.syntax import graph_argument
from ..ir.types import DType, format_shape

__all__ = ["gradcheck", "GradcheckReport", "InputCheck", "DirectionCheck", "GradcheckError", "promote",
           "DEFAULT_RTOL", "DEFAULT_ATOL"]

DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-6
STEP = 1e-3  # h relative to max(1, rms(x_i)): the extrapolation is O(h^4), the rounding error ~eps/h
# The tries of one direction: (point, step divisor); point 0 is the given one, k > 0 is shifted by 10^(k-4).
TRIES = ((0, 1), (0, 10), (0, 100), (0, 1000), (1, 10), (2, 100))
SAFETY = 2.0  # fd is trusted when SAFETY x its estimated error is within the tolerance


@dataclass
class DirectionCheck:
    fd: float
    ad: float
    step: float
    status: str  # "pass", "FAIL" or "kink" (unresolved on every try)
    shift: float = 0.0  # relative shift of the point it was checked at (0: the given point)

    @property
    def abs_err(self) -> float:
        return abs(self.fd - self.ad)

    @property
    def rel_err(self) -> float:
        e = self.abs_err
        return e / abs(self.fd) if self.fd != 0 else (0.0 if e == 0 else math.inf)


@dataclass
class InputCheck:
    """The directions checked for one input; its status is the worst of theirs."""

    name: str
    shape: tuple
    directions: list[DirectionCheck] = field(default_factory=list)
    label: Optional[str] = None  # the input's label, if it has one

    @property
    def key(self) -> str:
        """What the table and messages call the input: its label where it has one (as ``gradir run``'s
        summary and ``.npz`` files do), else its name."""
        return self.name if self.label is None else self.label

    @property
    def status(self) -> str:
        statuses = {d.status for d in self.directions}
        return "FAIL" if "FAIL" in statuses else "kink" if "kink" in statuses else "pass"

    @property
    def worst(self) -> DirectionCheck:
        order = {"FAIL": 2, "kink": 1, "pass": 0}
        return max(self.directions, key=lambda d: (order[d.status], _nan_high(d.abs_err)))


def _nan_high(x: float) -> float:
    return math.inf if math.isnan(x) else x


@dataclass
class GradcheckReport:
    """What ``gradcheck`` found: one ``InputCheck`` per requested input, in ``wrt`` order."""

    checks: list[InputCheck]
    rtol: float
    atol: float
    promoted: bool = False  # the graph was Float32 and ran in Float64
    generated: list[str] = field(default_factory=list)  # inputs drawn from the seed

    @property
    def ok(self) -> bool:
        return all(c.status == "pass" for c in self.checks)

    def table(self) -> str:
        rows = [("input", "shape", "directions", "worst |fd-ad|", "rel error", "step", "status")]
        for c in self.checks:
            w = c.worst
            rows.append((c.key, format_shape(c.shape), str(len(c.directions)), f"{w.abs_err:.3g}",
                         f"{w.rel_err:.3g}", f"{w.step:.0e}", c.status))
        from .compare import format_table
        return format_table(rows, {2, 3, 4, 5})

    def notes(self) -> list[str]:
        """What a reader of the table must also know: shifted points, unresolved and failed directions."""
        out = []
        for c in self.checks:
            shifted = [d for d in c.directions if d.shift]
            if shifted:
                sizes = ", ".join(sorted({f"{d.shift:g}" for d in shifted}))
                out.append(f"{c.key}: {len(shifted)} of {len(c.directions)} directions checked at a point shifted "
                           f"by {sizes} (relative): finite differences were not smooth at the given point, "
                           f"which is likely on a kink such as Relu at 0")
            kinks = [d for d in c.directions if d.status == "kink"]
            if kinks:
                out.append(f"{c.key}: {len(kinks)} direction{'s' if len(kinks) > 1 else ''} could not be "
                           f"checked: finite differences were not smooth on any segment tried (kinks); try "
                           f"another --seed or other inputs")
            d = c.worst
            if d.status == "FAIL":
                out.append(f"{c.key}: fd {d.fd:.10g} but ad {d.ad:.10g}: |fd-ad| {d.abs_err:.3g} > atol + rtol*|fd| "
                           f"= {self.atol + self.rtol * abs(d.fd):.3g} (the worst failing direction)")
        return out

    def __str__(self) -> str:
        return "\n".join([self.table(), *self.notes()])


def promote(graph: Graph) -> tuple[Graph, bool]:
    """``graph`` with every Float32 input made Float64 and every type inferred again (a Float32
    Constant becomes Float64 too, and the IR has no casts, so every float value then is Float64);
    returns (graph, whether it changed)."""
    if not any(i.type.dtype is DType.Float32 for i in graph.inputs):
        return graph, False
    inputs = [GraphInput(i.name, i.type.with_dtype(DType.Float64) if i.type.dtype is DType.Float32 else i.type,
                         i.span, i.type_span) for i in graph.inputs]
    g = Graph(inputs, [_promoted(op) for op in graph.ops], graph.outputs, graph.name, graph.source)
    g.output_spans, g.name_span = list(graph.output_spans), graph.name_span
    return g.validate(), True


def _promoted(op: Op) -> Op:
    """``op`` to be typed again; a declared Float32 type (a ``Constant``'s) becomes Float64 with the inputs."""
    if not op.DECLARED_TYPE:
        return op.copy(result_types=None)
    return op.copy(result_types=[t.with_dtype(DType.Float64) if t is not None and t.dtype is DType.Float32 else t
                                 for t in op.result_types or []] or None)


def _fits_backward(fwd: Graph, bwd: Graph, wrt: list[str]) -> list[tuple[str, str]]:
    """Check that ``bwd`` follows ``gradir grad``'s convention for ``fwd`` and ``wrt``; returns its
    (cotangent input, forward output) pairs."""
    file = bwd.source.filename if bwd.source else None
    problems = []
    want = [(i.name, i.type) for i in fwd.inputs] + [(None, fwd.types[o]) for o in fwd.outputs]
    have = [(i.name, i.type) for i in bwd.inputs]
    if len(have) != len(want):
        problems.append(f"the backward graph has {len(have)} inputs; it needs {len(want)}: the forward graph's "
                        f"{len(fwd.inputs)} inputs, then one cotangent per forward output ({len(fwd.outputs)})")
    else:
        for k, ((wn, wt), (hn, ht)) in enumerate(zip(want, have)):
            what = f"forward input {wn}" if wn else f"the cotangent of {fwd.outputs[k - len(fwd.inputs)]}"
            if (wn is not None and hn != wn) or wt != ht:
                problems.append(f"backward input {k} is {hn} : {ht}; it should be {what} : {wt}")
    if len(bwd.outputs) != len(wrt):
        n = f"{len(wrt)} gradient{'s are' if len(wrt) != 1 else ' is'}"
        problems.append(f"the backward graph has {len(bwd.outputs)} outputs but {n} checked ({', '.join(wrt)}); "
                        f"name the inputs its outputs are gradients of with --wrt, in order")
    else:
        fin = {i.name: i.type for i in fwd.inputs}
        for o, w in zip(bwd.outputs, wrt):
            if bwd.types[o] != fin[w]:
                problems.append(f"backward output {o} is {bwd.types[o]}, but the gradient of {w} is {fin[w]}")
    if problems:
        raise GradcheckError([Diagnostic(p, filename=file) for p in problems])
    return [(i.name, o) for i, o in zip(bwd.inputs[len(fwd.inputs):], fwd.outputs)]


def _prepare_inputs(graph: Graph, exe, given: Optional[Mapping[str, np.ndarray]], seed: int,
                    generate_missing: bool, promoted: bool) -> tuple[dict[str, np.ndarray], list[str]]:
    from .inputs import check_generated, complete_inputs
    file = graph.source.filename if graph.source else "<graph>"
    if given is not None:
        from ..ir.labels import inputs_by_name
        given = inputs_by_name(graph, given, file)  # keyed by label or by name
    if given is None or generate_missing:
        x, generated = complete_inputs(graph, given or {}, seed)  # drawn as `gradir run` draws them
    else:
        x, generated = dict(given), []
    f32 = {i.name for i in graph.inputs if i.type.dtype is DType.Float32}
    x = {n: a.astype(np.float64) if n in f32 and isinstance(a, np.ndarray) and a.dtype == np.float32 else a
         for n, a in x.items()}
    check_generated(exe, x, generated, file)
    try:
        arrays, _ = exe.check_inputs(x)
    except InputError as e:
        if any(m.startswith("missing input") for m in e.messages):
            e.diagnostics.append(Diagnostic("the inputs not given can be drawn from the seed with "
                                            "--generate-missing", filename=file))
        if promoted:
            e.diagnostics.append(Diagnostic("the check runs this Float32 graph in Float64 (hence the types "
                                            "above); give its inputs as float32 or float64 arrays", filename=file))
        raise
    return arrays, generated


def _tolerance_argument(value: object, what: str) -> float:
    """A tolerance: a finite real number >= 0 (an int, a float or a NumPy scalar of one)."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    try:
        x = float(value) if ok else math.nan  # type: ignore[arg-type]
    except OverflowError:
        x = math.inf
    if not (math.isfinite(x) and x >= 0):
        raise ArgumentError(f"{what} must be a finite number >= 0, got {shown(value)}")
    return x


def gradcheck(graph: Union[Graph, str], wrt: Optional[Iterable[str]] = None, seed: int = 0,
              inputs: Optional[Mapping[str, np.ndarray]] = None, *, generate_missing: bool = False,
              backward: Optional[Union[Graph, str]] = None, directions: int = 3, rtol: float = DEFAULT_RTOL,
              atol: float = DEFAULT_ATOL, threads: Optional[int] = None) -> GradcheckReport:
    """Check the gradients of forward ``graph`` (a Graph, IR text or a path) against finite differences.

    ``wrt``: the inputs to check (default every floating-point input).  ``inputs``: the point (default:
    drawn from ``seed`` as ``gradir run`` draws them; with ``generate_missing`` only the inputs not given
    are).  ``backward``: a backward graph in ``gradir.grad``'s convention to check instead of the derived
    one.  ``seed`` also draws the cotangents and directions.  Returns a ``GradcheckReport`` (``.ok``,
    ``.table()``); see the module docstring for the method.  Bad arguments raise ``gradir.ArgumentError``.
    """
    from ..autodiff.driver import parse_wrt, derive
    from ..backends.cpu.runtime import compile
    graph = graph_argument(graph, "gradcheck()")
    rtol, atol = _tolerance_argument(rtol, "rtol"), _tolerance_argument(atol, "atol")
    for name, value, low in (("directions", directions, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ArgumentError(f"{name} must be {'a positive' if low else 'a non-negative'} integer, "
                                f"got {shown(value)}")
    if inputs is not None and not isinstance(inputs, Mapping):
        raise ArgumentError(f"inputs must be a mapping of input names to arrays, or None, got "
                            f"{type(inputs).__name__}")
    if not isinstance(generate_missing, bool):
        raise ArgumentError(f"generate_missing must be True or False, got {shown(generate_missing)}")
    # derive (or match) in the file's own types, so that messages show them; then promote both graphs
    if backward is None:
        d = derive(graph, wrt)
        backward, wrt_names, cotangents = d.graph, d.wrt, d.cotangents
    else:
        backward = graph_argument(backward, "gradcheck(backward=...)")
        wrt_names = parse_wrt(graph, wrt)
        cotangents = _fits_backward(graph, backward, wrt_names)
    g64, promoted = promote(graph)
    bwd = promote(backward)[0]
    fwd_exe, bwd_exe = compile(g64, threads), compile(bwd, threads)
    x, generated = _prepare_inputs(graph, fwd_exe, inputs, seed, generate_missing, promoted)

    rng = np.random.default_rng((seed, 0x67726164))  # the directions' own stream: not the inputs'
    y = dict(zip(g64.outputs, fwd_exe.run(x).values()))  # by value name (run keys outputs by label)
    file = graph.source.filename if graph.source else None
    for o, a in y.items():
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise InputError(Diagnostic(f"output {o} is not finite (NaN or Inf) at these inputs; gradients "
                                        f"can only be checked where the graph is finite", filename=file))
    cots = {c: (rng.standard_normal(y[o].shape) if y[o].dtype.kind == "f" else np.zeros_like(y[o]))
            for c, o in cotangents}
    pairs = [(cots[c], o) for c, o in cotangents if y[o].dtype.kind == "f"]

    def loss(point: Mapping[str, np.ndarray]) -> float:
        out = dict(zip(g64.outputs, fwd_exe.run(point).values()))
        return float(sum(np.dot(u.ravel(), out[o].ravel()) for u, o in pairs))

    points: dict[int, tuple[dict, float, list]] = {}  # k -> (point, L(point), gradients there)

    def point(k: int) -> tuple[dict, float, list]:
        if k not in points:
            p = dict(x)
            if k:
                srng = np.random.default_rng((seed, 0x73686966, k))
                for w in wrt_names:
                    p[w] = x[w] + 10.0 ** (k - 4) * _scale(x[w]) * srng.standard_normal(x[w].shape)
            res = bwd_exe.run({**p, **cots})
            points[k] = (p, loss(p), list(res.values()))  # in output order
        return points[k]

    checks = []
    labels = {i.name: i.label for i in graph.inputs}
    for i, w in enumerate(wrt_names):
        check = InputCheck(w, x[w].shape, label=labels.get(w))
        for _ in range(directions):
            check.directions.append(_check_direction(loss, point, i, w, rng, rtol, atol))
        checks.append(check)
    return GradcheckReport(checks, rtol, atol, promoted, generated)


def _scale(a: np.ndarray) -> float:
    return max(1.0, float(np.sqrt(np.mean(a * a)))) if a.size else 1.0


def _check_direction(loss: Callable[[Mapping[str, np.ndarray]], float], point: Callable, i: int, w: str,
                     rng: np.random.Generator, rtol: float, atol: float) -> DirectionCheck:
    """One direction for input ``w`` (gradient ``i``), tried as ``TRIES`` says until it is resolved."""
    for k, div in TRIES:
        p, f0, grads = point(k)
        v = rng.standard_normal(p[w].shape)
        v /= np.linalg.norm(v) or 1.0
        h = STEP * _scale(p[w]) / div
        ad = float(np.dot(grads[i].ravel(), v.ravel()))
        fd, err = _estimate(loss, p, w, v, h, f0)
        shift = 10.0 ** (k - 4) if k else 0.0
        if not math.isfinite(ad):
            return DirectionCheck(fd, ad, h, "FAIL", shift)
        allowed = atol + rtol * abs(fd)
        if math.isfinite(fd) and abs(fd - ad) <= allowed:
            return DirectionCheck(fd, ad, h, "pass", shift)
        if SAFETY * err <= allowed and abs(fd - ad) > allowed + SAFETY * err:  # fd is trustworthy: ad is wrong
            return DirectionCheck(fd, ad, h, "FAIL", shift)
    return DirectionCheck(fd, ad, h, "kink", shift)


def _estimate(loss: Callable[[Mapping[str, np.ndarray]], float], p: Mapping[str, np.ndarray], w: str,
              v: np.ndarray, h: float, f0: float) -> tuple[float, float]:
    """(Richardson-extrapolated central difference of L along ``v`` in ``w``, an estimate of its error that
    is large when L is not smooth on ``p ± h v``); see the module docstring."""
    def at(t: float) -> float:
        q = dict(p)
        q[w] = p[w] + t * v
        return loss(q)
    fp1, fm1, fp2, fm2 = at(h), at(-h), at(h / 2), at(-h / 2)
    c1, c2 = (fp1 - fm1) / (2 * h), (fp2 - fm2) / h
    d1, d2 = (fp1 - 2 * f0 + fm1) / h, (fp2 - 2 * f0 + fm2) / (h / 2)
    fd = c2 + (c2 - c1) / 3
    err = abs(c2 - c1) + abs(d1 - 2 * d2) / 2
    if not (math.isfinite(fd) and math.isfinite(err)):
        return math.nan, math.inf
    return fd, err
