"""Hypothesis strategies: random *valid* graphs using every registered op.

``OP_EXAMPLES`` maps each op name to a function ``draw -> (operand types,
attrs)`` that makes a valid instance.  An op without an entry of its own gets one derived from
its ``Op.example`` (``example_strategy``), so every registered op (user ops too) has one and a
new op cannot slip past the round-trip tests; the entries written here draw what an example
cannot (random shapes with broadcasting, attributes, integer dtypes, optional operands).
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import numpy as np
from hypothesis import strategies as st

from gradir import DType, Graph, GraphInput, OPS, TensorType

FLOATS = [DType.Float32, DType.Float64]
dims = st.integers(1, 5)


def shape(draw, min_rank=0, max_rank=4):
    return [draw(dims) for _ in range(draw(st.integers(min_rank, max_rank)))]


def fdtype(draw):
    return draw(st.sampled_from(FLOATS))


def T(dtype, shp):
    return TensorType(dtype, shp)


nice_floats = st.one_of(st.floats(-10, 10, allow_nan=False, width=64),
                        st.sampled_from([0.01, 1.702, 1e-05, 0.1, 1e300, -2.5, 3.0]))
# activation slopes must be usable in Float32 (|alpha| <= 1e38, see gradir.ops.common)
alpha_floats = st.one_of(st.floats(-10, 10, allow_nan=False, width=64),
                         st.sampled_from([0.01, 1.702, 1e-05, 0.1, 1e38, -2.5, 3.0]))


def _unary(draw, dtypes=FLOATS):
    return [T(draw(st.sampled_from(dtypes)), shape(draw))], {}


def _alpha_unary(draw):
    ts, _ = _unary(draw)
    return ts, ({"alpha": draw(alpha_floats)} if draw(st.booleans()) else {})


def _grad(draw):
    t = T(fdtype(draw), shape(draw))
    return [t, t], {}


def _alpha_grad(draw):
    ts, _ = _grad(draw)
    return ts, ({"alpha": draw(alpha_floats)} if draw(st.booleans()) else {})


def _axis_unary(draw, grad=False):
    shp = shape(draw, 1)
    t = T(fdtype(draw), shp)
    return ([t, t] if grad else [t]), {"axis": draw(st.integers(-len(shp), len(shp) - 1))}


def _binary(draw, dtypes=FLOATS + [DType.Int32, DType.Int64]):
    dt = draw(st.sampled_from(dtypes))
    a = shape(draw)
    b = list(a[draw(st.integers(0, len(a))):])  # a suffix broadcasts
    b = [1 if draw(st.booleans()) else d for d in b]
    if draw(st.booleans()):
        a, b = b, a
    return [T(dt, a), T(dt, b)], {}


def _matmul(draw):
    dt = fdtype(draw)
    m, k, n = draw(dims), draw(dims), draw(dims)
    batch = shape(draw, 0, 2)
    a = batch + [m, k] if draw(st.booleans()) else [k]
    b = [k, n] if draw(st.booleans()) else ([k] if len(a) > 1 else [k, n])
    return [T(dt, a), T(dt, b)], {}


def _fused_matmul(draw):
    """Each operand a vector, a matrix or a batch of them, stored as its flags lay it out."""
    dt = fdtype(draw)
    m, k, n = draw(dims), draw(dims), draw(dims)
    batch = shape(draw, 0, 2)
    attrs = {}
    if draw(st.booleans()):
        attrs["alpha"] = draw(st.floats(-4, 4, allow_nan=False))

    def operand(side, rows, cols):
        if draw(st.integers(0, 3)) == 0:
            return [k]
        tr, tb = draw(st.booleans()), bool(batch) and draw(st.booleans())
        mat = [cols, rows] if tr else [rows, cols]
        if tr:
            attrs[f"trans{side}"] = 1
        if tb:
            attrs[f"transBatch{side}"] = 1
            return [mat[0]] + batch + [mat[1]]
        return batch + mat

    a = operand("A", m, k)
    b = operand("B", k, n)
    if len(a) == 1 and len(b) == 1:
        b = [k, n]
    return [T(dt, a), T(dt, b)], attrs


def _transpose(draw):
    shp = shape(draw)
    perm = draw(st.permutations(list(range(len(shp)))))
    return [T(draw(st.sampled_from(list(DType))), shp)], ({"perm": list(perm)} if draw(st.booleans()) else {})


def _reshape(draw):
    shp = shape(draw, 1)
    n = 1
    for d in shp:
        n *= d
    new = [n] if draw(st.booleans()) else [1, n]
    if draw(st.booleans()):
        new[draw(st.integers(0, len(new) - 1))] = -1
    return [T(fdtype(draw), shp)], {"shape": new}


def _reduce(draw, dtypes=FLOATS):
    shp = shape(draw, 1)
    attrs = {}
    if draw(st.booleans()):
        axes = draw(st.lists(st.integers(0, len(shp) - 1), unique=True, max_size=len(shp)))
        attrs["axes"] = [a - len(shp) if draw(st.booleans()) else a for a in axes]
    if draw(st.booleans()):
        attrs["keepdims"] = draw(st.booleans())
    return [T(draw(st.sampled_from(dtypes)), shp)], attrs


def _sum(draw):
    t = T(fdtype(draw), shape(draw))
    return [t] * draw(st.integers(1, 4)), {}


def _cell(draw):
    dt = fdtype(draw)
    B, I, H = draw(dims), draw(dims), draw(dims)
    return [T(dt, [B, I]), T(dt, [B, H]), T(dt, [B, H]), T(dt, [4 * H, I]), T(dt, [4 * H, H]),
            T(dt, [4 * H])], B, I, H, dt


def _lstm_cell(draw):
    ts, B, I, H, dt = _cell(draw)
    return ts, {"hidden_size": H}


def _grad_cell(draw, fused=False):
    ts, B, I, H, dt = _cell(draw)
    dc = T(dt, [B, H]) if draw(st.booleans()) else None
    attrs = {"hidden_size": H}
    if fused:
        attrs["input_indices"] = draw(st.lists(st.integers(0, 5), min_size=1, max_size=6, unique=True))
    else:
        attrs["input_index"] = draw(st.integers(0, 5))
    return [T(dt, [B, H]), dc] + ts, attrs


def _layer(draw):
    dt = fdtype(draw)
    S, B, I, H = draw(dims), draw(dims), draw(dims), draw(dims)
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    D = 2 if direction == "bidirectional" else 1
    attrs = {"hidden_size": H}
    if direction != "forward" or draw(st.booleans()):
        attrs["direction"] = direction
    if draw(st.booleans()):
        attrs["activations"] = ["sigmoid", "tanh", "tanh"] * D
    opt = lambda t: t if draw(st.booleans()) else None  # noqa: E731
    return dt, S, B, I, H, D, attrs, opt


def _lstm_training(draw):
    dt, S, B, I, H, D, attrs, opt = _layer(draw)
    ts = [T(dt, [S, B, I]), T(dt, [D, 4 * H, I]), T(dt, [D, 4 * H, H]), opt(T(dt, [D, 8 * H])),
          opt(T(draw(st.sampled_from([DType.Int32, DType.Int64])), [B])), opt(T(dt, [D, B, H])),
          opt(T(dt, [D, B, H])), opt(T(dt, [D, 3 * H]))]
    return ts, attrs


def _lstm_grad(draw):
    dt, S, B, I, H, D, attrs, opt = _layer(draw)
    ts = [T(dt, [S, B, I]), T(dt, [D, 4 * H, I]), T(dt, [D, 4 * H, H]), opt(T(DType.Int32, [B])),
          opt(T(dt, [D, B, H])), opt(T(dt, [D, B, H])), T(dt, [S, D, B, H]), T(dt, [S, D, B, H]),
          T(dt, [S, D, B, 4 * H]), opt(T(dt, [S, D, B, H])), opt(T(dt, [D, B, H])), opt(T(dt, [D, B, H])),
          opt(T(dt, [D, 3 * H]))]
    return ts, attrs


def _gru(draw, grad=False):
    """GRUTraining (GRUGrad with ``grad``): every direction, both linear_before_reset values, a clip or none,
    each activation spelling, optional operands left out at random."""
    dt = fdtype(draw)
    S, B, I, H = draw(dims), draw(dims), draw(dims), draw(dims)
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    D = 2 if direction == "bidirectional" else 1
    attrs = {"hidden_size": H, "linear_before_reset": draw(st.sampled_from([0, 1]))}
    if direction != "forward" or draw(st.booleans()):
        attrs["direction"] = direction
    if draw(st.booleans()):
        attrs["activations"] = draw(st.sampled_from([["sigmoid", "tanh"], ["Sigmoid", "Tanh"]])) * D
    if draw(st.booleans()):
        attrs["clip"] = draw(st.sampled_from([0.5, 3.0]))
    opt = lambda t: t if draw(st.booleans()) else None  # noqa: E731
    ts = [T(dt, [S, B, I]), T(dt, [D, 3 * H, I]), T(dt, [D, 3 * H, H]), opt(T(dt, [D, 6 * H])),
          opt(T(draw(st.sampled_from([DType.Int32, DType.Int64])), [B])), opt(T(dt, [D, B, H]))]
    if grad:
        ts += [T(dt, [S, D, B, H]), T(dt, [S, D, B, 3 * H]), opt(T(dt, [S, D, B, H])), opt(T(dt, [D, B, H]))]
    return ts, attrs


def _softmax_cross_entropy(draw, grad=False):
    """scores [N, C, d...], labels [N, d...] (Int32 or Int64), weights [C] or omitted; the gradient op
    takes dY (scalar, or the labels' shape for reduction "none") first."""
    dt = fdtype(draw)
    N, C = draw(dims), draw(dims)
    extra = shape(draw, 0, 2)
    scores = T(dt, [N, C] + extra)
    labels = T(draw(st.sampled_from([DType.Int32, DType.Int64])), [N] + extra)
    weights = T(dt, [C]) if draw(st.booleans()) else None
    attrs = {}
    reduction = draw(st.sampled_from([None, "none", "sum", "mean"]))
    if reduction is not None:
        attrs["reduction"] = reduction
    if draw(st.booleans()):
        attrs["ignore_index"] = draw(st.sampled_from([-100, -1, 0, 1, 2**40]))
    if grad:
        return [T(dt, [N] + extra if reduction == "none" else []), scores, labels, weights], attrs
    return [scores, labels, weights], attrs


def _broadcast_pair(draw):
    """(small, big) shapes where small broadcasts to big (NumPy rules)."""
    big = shape(draw)
    small = list(big[draw(st.integers(0, len(big))):])
    return [1 if draw(st.booleans()) else d for d in small], big


def _reduce_sum_to(draw):
    small, big = _broadcast_pair(draw)
    return [T(fdtype(draw), big), T(draw(st.sampled_from(list(DType))), small)], {}


def _broadcast_to(draw):
    small, big = _broadcast_pair(draw)
    return [T(fdtype(draw), small), T(draw(st.sampled_from(list(DType))), big)], {}


def _unsqueeze(draw):
    shp = shape(draw, 0, 3)
    r = len(shp) + draw(st.integers(1, 2))
    axes = draw(st.lists(st.integers(0, r - 1), min_size=r - len(shp), max_size=r - len(shp), unique=True))
    return [T(fdtype(draw), shp)], {"axes": [a - r if draw(st.booleans()) else a for a in axes]}


_CONST_ELEMENTS = {
    DType.Float32: st.one_of(st.floats(width=32), st.integers(-100, 100)),
    DType.Float64: st.one_of(st.floats(), st.integers(-(2**53), 2**53)),
    DType.Int32: st.integers(-(2**31), 2**31 - 1),
    DType.Int64: st.integers(-(2**63), 2**63 - 1),
    DType.Bool: st.booleans(),
}


def constant_example(draw) -> tuple[dict, TensorType]:
    """A Constant's attributes and its (declared, required) type: a scalar fill or a full list."""
    t = T(draw(st.sampled_from(list(DType))), shape(draw, 0, 3))
    elem = _CONST_ELEMENTS[t.dtype]
    if draw(st.booleans()):
        return {"value": draw(elem)}, t
    return {"value": draw(st.lists(elem, min_size=t.numel, max_size=t.numel))}, t


# ops whose result type is declared, not inferred: draw -> (attrs, result type)
DECLARED_EXAMPLES: dict[str, Callable] = {"Constant": constant_example}


def example_strategy(name: str) -> Callable:
    """``draw -> (operand types, attrs)`` from op ``name``'s ``Op.example``: its attributes and operand
    types, the floating-point ones in a drawn float dtype; an element-wise op whose operands share one
    shape (``ELEMENTWISE = "same"``) gets a drawn shape (the dtype drawn first, then the shape)."""
    cls = OPS[name]

    def draw_example(draw: Callable) -> tuple[list, dict]:
        dt = fdtype(draw)
        arrays, attrs = cls.example(np.random.default_rng(0), dt.numpy)
        shp = shape(draw) if cls.ELEMENTWISE == "same" else None
        types = []
        for a in arrays:
            if a is None:
                types.append(None)
                continue
            a = np.asarray(a)
            types.append(T(dt if a.dtype.kind == "f" else DType.from_numpy(a.dtype), a.shape if shp is None else shp))
        return types, dict(attrs)
    return draw_example


class _Examples(dict):
    """The hand-written strategies; any other registered op's is derived from its example."""

    def __missing__(self, name: str) -> Callable:
        if name not in OPS:
            raise KeyError(name)
        return example_strategy(name)


OP_EXAMPLES: dict[str, Callable] = _Examples({
    "Constant": lambda d: ([], constant_example(d)[0]),  # no operands; its type is in DECLARED_EXAMPLES
    "Neg": lambda d: _unary(d, FLOATS + [DType.Int32, DType.Int64]),
    "Identity": lambda d: _unary(d, list(DType)),
    "LeakyRelu": _alpha_unary, "QuickGelu": _alpha_unary,
    "Softmax": _axis_unary, "LogSoftmax": _axis_unary,
    "LeakyReluGrad": _alpha_grad, "QuickGeluGrad": _alpha_grad,
    **{n: (lambda d: _axis_unary(d, True)) for n in ["SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad",
                                                      "LogSoftmaxGrad_13"]},
    "Add": _binary, "Sub": _binary, "Mul": _binary, "Div": lambda d: _binary(d, FLOATS),
    "MatMul": _matmul, "FusedMatMul": _fused_matmul, "Transpose": _transpose, "Reshape": _reshape,
    "ReduceSum": lambda d: _reduce(d, FLOATS + [DType.Int32, DType.Int64]), "ReduceMean": _reduce,
    "Sum": _sum,
    "LSTMCell": _lstm_cell, "GradLSTMCellInput": _grad_cell,
    "GradLSTMCellInputFused": lambda d: _grad_cell(d, True),
    "LSTMTraining": _lstm_training, "LSTMGrad": _lstm_grad,
    "GRUTraining": _gru, "GRUGrad": lambda d: _gru(d, True),
    "SoftmaxCrossEntropyLoss": _softmax_cross_entropy,
    "SoftmaxCrossEntropyLossGrad": lambda d: _softmax_cross_entropy(d, True),
    "ReduceSumTo": _reduce_sum_to, "BroadcastTo": _broadcast_to, "Unsqueeze": _unsqueeze,
    "Scale": lambda d: (_unary(d)[0], {"factor": d(nice_floats)}),
    "ZerosLike": lambda d: _unary(d, FLOATS + [DType.Int32, DType.Int64]),
})


ODD_LABELS = st.one_of(
    st.sampled_from(["x", "onnx::loss::2", "W1_grad", "grad(x)", 'say "hi"', "back\\slash", "tab\there",
                     "ünïcödé ∂x", "😀", "a # not a comment", "a, b", " spaced ", "t",
                     "t0x", "\u2028", "line\nbreak",
                     "input t0 : Float32 [2]"]),
    st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1, max_size=12))
PLAIN_LABELS = st.text(st.sampled_from("abcxyzXW019_:.()[]/-"), min_size=1, max_size=10)


@st.composite
def graphs(draw, max_ops: int = 6, unknown_dims: bool = True, labels: Optional[str] = None) -> Graph:
    """A random valid graph: several ops (any registered), some sharing inputs,
    some `?` dims, some `_` operands, some types omitted; validated.  ``labels``
    ("odd" or "plain") labels some inputs and outputs with unique labels drawn
    from ``ODD_LABELS`` or ``PLAIN_LABELS``."""
    n_ops = draw(st.integers(1, max_ops))
    counter = iter(range(10_000))
    names = sorted(OPS)
    inputs: list[GraphInput] = []
    ops = []
    outputs = []
    available: dict[TensorType, list[str]] = {}
    for _ in range(n_ops):
        name = draw(st.sampled_from(names))
        if name in DECLARED_EXAMPLES:
            attrs, t = DECLARED_EXAMPLES[name](draw)
            results = [f"t{next(counter)}"]
            ops.append(OPS[name](results, [], attrs, [t]))
            available.setdefault(t, []).append(results[0])
            outputs.extend(r for r in results if draw(st.booleans()))
            continue
        types, attrs = OP_EXAMPLES[name](draw)
        operands = []
        cls = OPS[name]
        for idx, t in enumerate(types):
            if t is None:
                operands.append(None)
                continue
            # class labels are an input of their own, read by this op only: their values must be valid
            # class indices for it (``demo_inputs`` draws them so), which another op's may not be
            labels = cls.operand_spec(idx).sample == "classes"
            if t in available and not labels and draw(st.booleans()):
                operands.append(draw(st.sampled_from(available[t])))
                continue
            v = f"t{next(counter)}"
            shown = t
            if unknown_dims and t.rank and draw(st.integers(0, 4)) == 0:
                k = draw(st.integers(0, t.rank - 1))
                shown = t.with_shape([None if j == k else d for j, d in enumerate(t.shape)])
            inputs.append(GraphInput(v, shown))
            if not labels:
                available.setdefault(t, []).append(v)
            operands.append(v)
        n_res = cls.num_results(cls(["t0"], operands, attrs).resolved_attrs())
        results = [f"t{next(counter)}" for _ in range(n_res)]
        op = cls(results, operands, attrs)
        ops.append(op)
        outputs.extend(r for r in results if draw(st.booleans()))
    if not outputs:
        outputs = list(ops[-1].results)
    name = draw(st.sampled_from([None, "g", "random_graph"]))
    output_labels = None
    if labels:
        strategy = ODD_LABELS if labels == "odd" else PLAIN_LABELS
        taken: set[str] = set()

        def label() -> Optional[str]:
            if not draw(st.booleans()):
                return None
            lb = draw(strategy)
            if lb in taken or re.fullmatch(r"t[0-9]+", lb):  # unique, never another value's name
                return None
            taken.add(lb)
            return lb
        for i in inputs:
            i.label = label()
        output_labels = [label() for _ in outputs]
    g = Graph(inputs, ops, outputs, name=name, output_labels=output_labels)
    return g.validate()


# -- commented files ---------------------------------------------------------------
comment_texts = st.one_of(
    st.sampled_from(["#", "# a comment", "#no space", "## twice # and again", '# "quoted # hash"', "# 'single'",
                     "# back\\slash \\\"", "# ünïcödé ∂x/∂y 😀", "# tab\there", "#   trailing spaces   ",
                     "# input t0 : Float32 [2]", "# a\rcarriage return inside"]),
    st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=30).map(
        lambda s: "#" + s))
INDENTS = st.sampled_from(["", " ", "\t", "    "])
BLANKS = st.sampled_from(["", " ", "\t", "  \t "])


@st.composite
def commented_texts(draw, g: Graph) -> tuple[str, list[tuple[str, str]]]:
    """``g``'s canonical text with comment lines, blank-line runs and trailing comments
    drawn around and on its statements, and CRLF or LF line ends.  Returns the text and
    what ``fmt`` must keep of it: ("stmt", line) | ("comment", text) | ("blank", "") in
    order, comments without trailing whitespace, blank runs as one, none first or last."""
    raw: list[str] = []
    events: list[tuple[str, str]] = []

    def gap() -> None:
        for _ in range(draw(st.integers(0, 3))):
            if draw(st.booleans()):
                text = draw(comment_texts)
                raw.append(draw(INDENTS) + text)
                events.append(("comment", text.rstrip()))
            else:
                for _ in range(draw(st.integers(1, 3))):
                    raw.append(draw(BLANKS))
                events.append(("blank", ""))

    for line in g.to_text().split("\n")[:-1]:
        gap()
        events.append(("stmt", line))
        if draw(st.booleans()):
            text = draw(comment_texts)
            raw.append(line + draw(st.sampled_from(["", " ", "  ", "\t", "      "])) + text)
            events.append(("comment", text.rstrip()))
        else:
            raw.append(line)
    gap()
    nl = draw(st.sampled_from(["\n", "\r\n"]))
    text = nl.join(raw) + (nl if draw(st.booleans()) or not raw[-1].strip() else "")
    kept: list[tuple[str, str]] = []
    for e in events:  # a run of blanks is one; none at the start or the end
        if e[0] != "blank" or (kept and kept[-1][0] != "blank"):
            kept.append(e)
    while kept and kept[-1][0] == "blank":
        kept.pop()
    return text, kept


# -- random DAGs of element-wise ops with broadcasting (the fuse-elementwise pass) ------------------------
# the ops whose fused loop gives the unfused kernels' bits (tests/test_fuse_elementwise.py checks each)
EXACT_ELEMENTWISE = ["Add", "Sub", "Mul", "Div", "Neg", "Scale", "Identity", "Sum", "Relu", "ReluGrad",
                     "LeakyRelu", "LeakyReluGrad", "SigmoidGrad", "TanhGrad", "ZerosLike"]


@st.composite
def elementwise_dags(draw, ops=tuple(EXACT_ELEMENTWISE), max_ops: int = 12, dtype=None, sums: bool = False) -> Graph:
    """A random DAG of element-wise ops over one loop shape: inputs of that shape or of shapes that
    broadcast to it (the binary ops broadcast them), some ops reading several earlier values,
    some values read twice, several outputs.  Some non-element-wise ops (Exp, a MatMul on a
    square shape) sit between element-wise ones, so a group must avoid cycles through them.
    With ``sums``, some ``ReduceSumTo`` ops sum a value over leading axes (a group may end in
    them) or over other axes (it may not), and a later op may read a sum back (broadcast)."""
    dt = dtype or draw(st.sampled_from(FLOATS))
    full = [draw(st.integers(1, 6)), draw(st.integers(2, 9)), draw(st.integers(2, 9))]
    counter = iter(range(10_000))
    inputs: list[GraphInput] = []
    full_values: list[str] = []
    ops_out = []

    def new_input(shp) -> str:
        v = f"t{next(counter)}"
        inputs.append(GraphInput(v, T(dt, shp)))
        return v

    for _ in range(2):
        full_values.append(new_input(full))

    def small() -> str:
        k = draw(st.integers(0, 2))
        shp = [1 if draw(st.booleans()) else d for d in full[k:]]
        return new_input(shp)

    def pick() -> str:
        return draw(st.sampled_from(full_values))

    sums_made: list[str] = []
    for _ in range(draw(st.integers(2, max_ops))):
        name = draw(st.sampled_from(list(ops) + ["Exp", "MatMul"] + ["ReduceSumTo"] * (2 * sums)))
        r = f"t{next(counter)}"
        attrs: dict = {}
        if name == "ReduceSumTo":
            kind = draw(st.sampled_from(["lead1", "lead2", "ones", "last"]))
            like = {"lead1": full[1:], "lead2": full[2:], "ones": [1, 1] + full[2:], "last": full[:2] + [1]}[kind]
            ops_out.append(OPS[name]([r], [pick(), new_input(like)]))
            sums_made.append(r)
            continue
        if name in ("Add", "Sub", "Mul", "Div") and sums_made and draw(st.integers(0, 3)) == 0:
            operands = [pick(), draw(st.sampled_from(sums_made))]  # a sum read back, broadcast
            ops_out.append(OPS[name]([r], operands, attrs))
            full_values.append(r)
            continue
        if name in ("Add", "Sub", "Mul", "Div"):
            a, b = pick(), (small() if draw(st.integers(0, 2)) == 0 else pick())
            operands = [b, a] if draw(st.booleans()) and name != "Div" else [a, b]
        elif name == "Sum":
            operands = [pick() for _ in range(draw(st.integers(1, 3)))]
        elif name == "MatMul":
            if full[1] != full[2]:
                continue
            operands = [pick(), pick()]
        elif name in ("ReluGrad", "LeakyReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad", "FastGeluGrad"):
            operands = [pick(), pick()]
        else:
            operands = [pick()]
        if name == "Scale":
            attrs["factor"] = draw(st.sampled_from([0.5, -1.5, 3.0, 0.1]))
        if name in ("LeakyRelu", "LeakyReluGrad") and draw(st.booleans()):
            attrs["alpha"] = draw(st.sampled_from([0.1, -2.0, 1.702]))
        ops_out.append(OPS[name]([r], operands, attrs))
        full_values.append(r)
    computed = [op.results[0] for op in ops_out]
    outputs = [v for v in computed if draw(st.integers(0, 3)) == 0 or v in sums_made] or computed[-1:]
    if not ops_out:
        ops_out.append(OPS["Neg"]([f"t{next(counter)}"], [full_values[0]]))
        outputs = ops_out[-1].results
    g = Graph(inputs, ops_out, outputs, "dag")
    g.validate()
    return g
