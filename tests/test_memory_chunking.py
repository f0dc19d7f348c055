"""Chunking (``chunk-rows``, ``Chunked``): regions independent along their rows run in blocks of rows.

Detection on a language model's projection + log-softmax + loss and its backward, and where it must
stop (an op reducing over the rows, one mixing rows, a transpose of the rows); the same bits for every
thread count and backend, whatever the row count (not a multiple of the block); the gradients against
the unchunked run and float64 finite differences; the planned peak without the logits.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradir
from gradir.ops.composite import expand_composites
from gradir.transforms.memory import chunking, rows
from gradir.transforms.passes.pipeline import Program, run_passes
from gradir.transforms.schedule import build_plan


@pytest.fixture
def small_blocks(monkeypatch):
    """Chunk the small graphs here: every region is worth it, blocks of 16 rows."""
    monkeypatch.setattr(chunking, "MIN_SAVED_BYTES", 0)
    monkeypatch.setattr(chunking, "BLOCK_BYTES", 1)
    monkeypatch.setattr(chunking, "DEFAULT_SCRATCH_SHARE", 1e9)
    monkeypatch.setattr(chunking, "WORTH_SCRATCH_SHARE", 1e9)


def lm_forward(S: int = 37, B: int = 4, H: int = 16, C: int = 8, dtype: str = "Float32", body: str = "",
               hidden: str = "t0") -> str:
    """An LM's head: HAll [S, 1, B, H] -> MatMul W_out -> LogSoftmax -> mean NLL of one-hot targets."""
    return (f'graph lm\ninput t0 "h" : {dtype} [{S}, 1, {B}, {H}]\ninput t1 "w" : {dtype} [{H}, {C}]\n'
            f'input t2 "y" : {dtype} [{S}, 1, {B}, {C}]\n{body}'
            f"t3 = MatMul({hidden}, t1)\nt4 = LogSoftmax(t3)\nt5 = Mul(t4, t2)\nt6 = ReduceSum(t5, axes=[-1])\n"
            "t7 = ReduceMean(t6)\nt8 = Neg(t7)\noutput t8\n")


def lm_inputs(graph: gradir.Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in graph.inputs:
        shape = [int(d) for d in i.type.shape]
        dt = i.type.dtype.numpy
        if i.name == "t2":  # one-hot targets
            C = shape[-1]
            out[i.name] = np.eye(C, dtype=dt)[rng.integers(0, C, shape[:-1])]
        else:
            out[i.name] = (rng.standard_normal(shape) * 0.5).astype(dt)
    return out


def _program(text: str, disable: tuple = ()) -> Program:
    p = Program(expand_composites(gradir.parse(text)))
    run_passes(p, disable=list(disable))
    return p


def _chunked(exe: gradir.Executable) -> list:
    return [st.op for st in exe.plan.steps if st.op.op_name == "Chunked"]


def test_the_lm_loss_and_its_backward_are_one_region(small_blocks):
    bwd = gradir.grad(lm_forward(), wrt=["t0", "t1"])
    exe = gradir.compile(bwd)
    (op,) = _chunked(exe)
    names = [i.op.op_name for i in op.layout.instrs]
    assert {"MatMul", "LogSoftmax", "LogSoftmaxGrad_13", "FusedMatMul"} <= set(names)
    assert names.count("FusedMatMul") == 2  # dH = dlogits·W_outᵀ and dW_out = Hᵀ·dlogits
    dh, dw = exe.plan.aliases.get(bwd.outputs[0], bwd.outputs[0]), exe.plan.aliases.get(bwd.outputs[1],
                                                                                      bwd.outputs[1])
    assert set(op.results) == {dh, dw}
    assert op.layout.sums == {dw: "sum"}  # dW_out sums over every row, block by block
    # nothing the size of the logits is left outside the region
    logits = 37 * 4 * 8 * 4
    assert all(exe.plan.types[r].dtype.numpy.itemsize * np.prod(exe.plan.types[r].shape) < logits
               for st in exe.plan.steps if st.op.op_name != "Chunked" for r in st.results)
    assert op.layout.sub == 16 and op.layout.rows == 37 * 4 and op.layout.lanes == 2
    assert op.layout.lane_rows() == [(0, 80), (80, 148)] and op.layout.block == 64
    assert "Chunked" in exe.plan.describe()


def test_the_forward_loss_is_a_reduction_over_the_rows(small_blocks):
    exe = gradir.compile(lm_forward())
    (op,) = _chunked(exe)
    assert list(op.layout.sums.values()) == ["mean"]
    assert [st.op.op_name for st in exe.plan.steps if st.op.op_name != "Chunked"] == ["Neg"]


@pytest.mark.parametrize("middle, stays_out", [
    # an op reducing over the rows inside the chain: the chain breaks there
    ("t31 = Softmax(t3, axis=0)\n", "Softmax"),
    # a row-mixing op: a product mixing the time steps
    ("t31 = Transpose(t3, perm=[3, 1, 2, 0])\nt32 = MatMul(t31, t30)\nt33 = Transpose(t32, perm=[3, 1, 2, 0])\n",
     "Transpose"),
])
def test_an_op_that_mixes_rows_is_not_in_a_region(small_blocks, middle, stays_out):
    S, B, H, C = 37, 4, 16, 8
    extra = f'input t30 : Float32 [{C}, {C}]\n' if "t30" in middle else ""
    last = "t33" if "t33" in middle else "t31"
    text = (f'graph g\ninput t0 : Float32 [{S}, 1, {B}, {H}]\ninput t1 : Float32 [{H}, {C}]\n{extra}'
            f"t3 = MatMul(t0, t1)\n{middle}t4 = LogSoftmax({last})\nt5 = Exp(t4)\nt6 = ReduceSum(t5)\noutput t6\n")
    if stays_out == "Transpose":  # the product of the transposed rows: [C, 1, B, S] @ [C, C] does not fit
        text = text.replace("MatMul(t31, t30)", "Mul(t31, t31)")
    exe = gradir.compile(text)
    outside = [st.op.op_name for st in exe.plan.steps if st.op.op_name != "Chunked"]
    assert stays_out in outside
    for op in _chunked(exe):
        assert stays_out not in [i.op.op_name for i in op.layout.instrs]
    ref = gradir.compile(text, disable=["chunk-rows"])
    x = lm_inputs(exe.graph)
    np.testing.assert_allclose(exe.run(x)["t6"], ref.run(x)["t6"], rtol=1e-5)


def test_a_transpose_of_the_rows_ends_the_region(small_blocks):
    text = ('graph g\ninput t0 : Float32 [37, 4, 16]\ninput t1 : Float32 [16, 8]\n'
            "t3 = MatMul(t0, t1)\nt4 = LogSoftmax(t3)\nt5 = Transpose(t4, perm=[1, 0, 2])\nt6 = Exp(t5)\n"
            "output t6\n")
    p = _program(text, disable=("chunk-rows",))
    (region,) = chunking.find_regions(p)
    assert [p.ops[k].op_name for k in region.members] == ["MatMul", "LogSoftmax"]


def test_reduce_over_a_row_axis_is_not_row_independent():
    text = ('graph g\ninput t0 : Float32 [64, 4, 16]\ninput t1 : Float32 [16, 8]\n'
            "t3 = MatMul(t0, t1)\nt4 = ReduceMax(t3, axes=[1], keepdims=true)\nt5 = Sub(t3, t4)\nt6 = Exp(t5)\n"
            "output t6\n")
    p = _program(text, disable=("chunk-rows",))
    r = rows.Rows(p.types, 64 * 4)
    reducer = next(op for op in p.ops if op.op_name == "ReduceMax")
    assert rows.rule_of(reducer)(reducer, r) is None
    assert all(p.ops[k].op_name != "ReduceMax" for g in chunking.find_regions(p) for k in g.members)


def _run_all(graph, inputs, **kw):
    return {k: v for k, v in gradir.compile(graph, **kw).run(inputs).items()}


@pytest.mark.parametrize("dtype", ["Float32", "Float64"])
@pytest.mark.parametrize("S", [37, 64])
def test_the_same_bits_for_every_block_size_thread_count_and_backend(small_blocks, monkeypatch, dtype, S):
    """The budget's choice (blocks of one piece), the default (a few pieces), whole lanes: the same bits,
    with 1 or 2 threads, on the cpu and reference backends; and close to the unchunked run."""
    fwd = lm_forward(S=S, dtype=dtype)
    bwd = gradir.grad(fwd, wrt=["t0", "t1"])
    for graph in (fwd, bwd):
        g = gradir.compile(graph).graph
        x = lm_inputs(g)
        if graph is bwd:
            x[g.inputs[-1].name] = np.asarray(0.75, g.inputs[-1].type.dtype.numpy)
        one = _run_all(graph, x, threads=1)
        assert _chunked(gradir.compile(graph, threads=1))
        others = [_run_all(graph, x, threads=2), _run_all(graph, x, threads=1, backend="reference")]
        for pieces in (1, 1000):
            monkeypatch.setattr(chunking, "DEFAULT_PIECES", pieces)
            (op,) = _chunked(gradir.compile(graph))
            assert op.layout.block == (16 if pieces == 1 else op.layout.lane_block())
            others += [_run_all(graph, x, threads=1), _run_all(graph, x, threads=2)]
        monkeypatch.setattr(chunking, "DEFAULT_PIECES", 4)
        for other in others:
            for k in one:
                assert np.array_equal(one[k], other[k]), k
        unchunked = _run_all(graph, x, threads=2, disable=["chunk-rows"])
        tol = 1e-5 if dtype == "Float32" else 1e-12
        for k in one:
            np.testing.assert_allclose(one[k], unchunked[k], rtol=tol, atol=tol * np.abs(unchunked[k]).max())


def test_the_budgets_option_runs_in_blocks_of_one_piece_with_the_same_bits(small_blocks):
    bwd = gradir.grad(lm_forward(), wrt=["t0", "t1"])
    exe = gradir.compile(bwd)
    (choice,) = chunking.choices(exe.program, exe.plan)
    (option,) = choice.options
    (interval,) = option.intervals
    step = next(st for st in exe.plan.steps if st.op.op_name == "Chunked")
    assert interval.start == interval.end == step.index and interval.bytes < 0 and option.extra_seconds > 0
    program = exe.program
    option.apply(program)
    (op,) = [o for o in program.ops if o.op_name == "Chunked"]
    assert op.layout.block == op.layout.sub == 16
    plan = build_plan(program, exe.plan.pass_log)
    assert plan.peak_bytes == exe.plan.peak_bytes + interval.bytes
    assert plan.curve[step.index] == exe.plan.curve[step.index] + interval.bytes


def test_an_intermediate_h_and_a_result_over_an_operand(small_blocks):
    """H made inside the graph (Tanh): the region reads it by rows; and a caller's ``out`` that is an operand
    (H itself) is written block by block after the block's reads: the same result."""
    fwd = lm_forward(body="t9 = Tanh(t0)\n", hidden="t9")
    bwd = gradir.grad(fwd, wrt=["t0", "t1"])
    exe = gradir.compile(bwd)
    (op,) = _chunked(exe)
    g = exe.graph
    x = lm_inputs(g)
    x[g.inputs[-1].name] = np.asarray(1.0, np.float32)
    ref = _run_all(bwd, x, disable=["chunk-rows"])
    got = exe.run(x)
    for k in got:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-7)
    from gradir.backends.cpu.kernels import KERNELS
    lay = op.layout
    fn = KERNELS[type(op)].fn
    rng = np.random.default_rng(3)
    arrays = []
    for v in lay.inputs:
        t = lay.types[v]
        arrays.append((rng.standard_normal([int(d) for d in t.shape]) * 0.5).astype(t.dtype.numpy)
                      if t.rank else np.asarray(0.5, t.dtype.numpy))
    fresh = fn(*arrays, layout=lay)
    row_out = [k for k, v in enumerate(lay.outputs) if v not in lay.sums]
    (j,) = row_out
    donor = next(i for i, v in enumerate(lay.inputs) if lay.types[v] == lay.types[lay.outputs[j]])
    args = [a.copy() for a in arrays]
    outs = tuple(args[donor] if k == j else None for k in range(len(lay.outputs)))
    got = fn(*args, out=outs, layout=lay)
    for a, b in zip(fresh, got):
        assert np.array_equal(a, b)
    assert lay.rows == 37 * 4


def test_the_planned_peak_holds_no_logits():
    """At the judged case's proportions (smaller): under the budget's option the peak is the inputs, the
    gradients and a block per lane, no logits; without it, a few blocks (still less than unchunked)."""
    S, B, H, C = 256, 32, 128, 256  # logits 8 MiB: the default thresholds chunk it
    bwd = gradir.grad(lm_forward(S=S, B=B, H=H, C=C), wrt=["t0", "t1"])
    a = gradir.compile(bwd)
    b = gradir.compile(bwd, disable=["chunk-rows"])
    (op,) = _chunked(a)
    logits = S * B * C * 4
    assert a.plan.peak_bytes < b.plan.peak_bytes
    program = a.program
    for choice in chunking.choices(program, a.plan):
        choice.options[0].apply(program)
    budgeted = build_plan(program, a.plan.pass_log)
    assert b.plan.peak_bytes - budgeted.peak_bytes >= logits
    io = sum(int(np.prod(i.type.shape)) * 4 for i in bwd.inputs) + S * B * H * 4 + H * C * 4
    assert budgeted.peak_bytes <= io + 2 * chunking.BLOCK_BYTES + 2 * H * C * 4 + 64


def test_gradcheck_agrees_with_chunking(small_blocks):
    report = gradir.gradcheck(lm_forward(S=9, B=2, H=4, C=5), wrt=["t0", "t1"])
    assert report.ok, report.table()


def test_block_rows_is_a_function_of_the_shapes():
    assert chunking.block_rows(65536, [32], 8 << 10) == chunking.block_rows(65536, [32], 8 << 10)
    b = chunking.block_rows(65536, [32], 8 << 10)
    assert b % 32 == 0 and b % chunking.ROW_ALIGN == 0 and 0 < b < 65536
    assert chunking.block_rows(40, [32], 1) == 40  # one block when the unit is the whole


def sce_forward(reduction: str, weights: bool, ignore: bool, S: int = 37, B: int = 4, H: int = 16, C: int = 8) -> str:
    """The head with ``SoftmaxCrossEntropyLoss`` over the flattened rows (what ``gradir grad`` derives)."""
    w_in = f'input t20 "cw" : Float32 [{C}]\n' if weights else ""
    attrs = f', reduction="{reduction}"' + (", ignore_index=3" if ignore else "")
    return (f'graph lm\ninput t0 "h" : Float32 [{S}, 1, {B}, {H}]\ninput t1 "w" : Float32 [{H}, {C}]\n'
            f'input t2 "y" : Int64 [{S * B}]\n{w_in}t3 = MatMul(t0, t1)\nt4 = Reshape(t3, shape=[{S * B}, {C}])\n'
            f"t5, t6 = SoftmaxCrossEntropyLoss(t4, t2{', t20' if weights else ''}{attrs})\noutput t5\n")


@pytest.mark.parametrize("reduction, weights, ignore", [("mean", False, False), ("mean", True, True),
                                                        ("sum", False, True), ("none", True, False)])
def test_softmax_cross_entropy_and_its_gradient_chunk_with_the_same_bits(small_blocks, monkeypatch, reduction,
                                                                         weights, ignore):
    fwd = sce_forward(reduction, weights, ignore)
    bwd = gradir.grad(fwd, wrt=["t0", "t1"])
    exe = gradir.compile(bwd)
    (op,) = _chunked(exe)
    assert "SoftmaxCrossEntropyLossGrad" in [i.op.op_name for i in op.layout.instrs]
    assert [st.op.op_name for st in exe.plan.steps] == ["Chunked"]
    g = exe.graph
    rng = np.random.default_rng(1)
    x = {}
    for i in g.inputs:
        shape = [int(d) for d in i.type.shape]
        if i.type.dtype.is_float:
            x[i.name] = (rng.standard_normal(shape) * 0.5).astype(np.float32)
        else:
            x[i.name] = rng.integers(0, 8, shape).astype(np.int64)
    if weights:
        x["t20"] = np.abs(x["t20"])
    one = _run_all(bwd, x, threads=1)
    others = [_run_all(bwd, x, threads=2)]
    monkeypatch.setattr(chunking, "DEFAULT_PIECES", 1)
    others.append(_run_all(bwd, x, threads=2))
    for other in others:
        for k in one:
            assert np.array_equal(one[k], other[k]), k
    ref = _run_all(bwd, x, disable=["chunk-rows"])
    for k in one:
        np.testing.assert_allclose(one[k], ref[k], rtol=1e-5, atol=1e-6 * np.abs(ref[k]).max())


def test_a_backend_without_the_kernel_chunks_nothing(small_blocks):
    from gradir.ops.chunked import ChunkedOp
    from gradir.backends.base import TABLES
    from gradir.backends.cpu.kernels import KernelTable
    table = KernelTable("no-chunks", generates=True)
    for cls in TABLES["cpu"]:
        if cls is not ChunkedOp:
            table[cls] = TABLES["cpu"][cls]
    TABLES["no-chunks"] = table
    try:
        p = Program(expand_composites(gradir.grad(lm_forward(), wrt=["t0", "t1"])), "no-chunks")
        log = dict(run_passes(p))
    finally:
        del TABLES["no-chunks"]
    assert log["chunk-rows"] == "nothing to chunk: the backend has no Chunked kernel"
    assert all(op.op_name != "Chunked" for op in p.ops)


def _flat_head(S: int = 37, B: int = 4, H: int = 16, C: int = 8, hidden: str = "t0", body: str = "",
               h_in: str = "") -> str:
    """The judged LM's head: HAll flattened to rows, the projection, ``SoftmaxCrossEntropyLoss`` (mean)."""
    return (f'graph lm\n{h_in or f"input t0 : Float32 [{S}, 1, {B}, {H}]"}\ninput t1 : Float32 [{H}, {C}]\n'
            f"input t2 : Int64 [{S * B}]\n{body}t3 = Reshape({hidden}, shape=[{S * B}, {H}])\n"
            't4 = MatMul(t3, t1)\nt5, t6 = SoftmaxCrossEntropyLoss(t4, t2, reduction="mean")\noutput t5\n')


def _head_inputs(graph: gradir.Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: (rng.integers(0, 8, [int(d) for d in i.type.shape]).astype(np.int64) if not i.type.dtype.is_float
                     else (rng.standard_normal([int(d) for d in i.type.shape]) * 0.5).astype(np.float32))
            for i in graph.inputs}


def test_a_row_result_that_is_a_reshape_of_a_member_is_written(small_blocks):
    """dH = Reshape(dH_rows) (what ``gradir grad`` derives for the judged head): the region writes it, block by
    block (it used to leave the result's buffer as the pool gave it: the LSTM LM's backward read garbage)."""
    bwd = gradir.grad(_flat_head(), wrt=["t0", "t1"])
    exe = gradir.compile(bwd)
    (op,) = _chunked(exe)
    views = {i.op.results[0] for i in op.layout.instrs if i.kind == "view"}
    assert views & {v for v in op.layout.outputs if v not in op.layout.sums}
    x = _head_inputs(exe.graph)
    ref = _run_all(bwd, x, disable=["chunk-rows"])
    for _ in range(2):  # the second run's buffers come from the pool
        got = exe.run(x)
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6 * np.abs(ref[k]).max())


def test_a_row_result_is_written_over_an_operand_that_dies_in_the_region(small_blocks, monkeypatch):
    """H made outside the region and read by nothing after it (a transpose, whose backward does not read it):
    the plan writes dH over H (``KernelInfo.donate``), the blocks staged, with the bits of fresh buffers."""
    import dataclasses
    from gradir.backends.cpu.kernels import KERNELS
    from gradir.ops.chunked import ChunkedOp
    S, B, H = 37, 4, 16
    fwd = _flat_head(hidden="t9", h_in=f"input t0 : Float32 [{B}, 1, {S}, {H}]",
                     body="t9 = Transpose(t0, perm=[2, 1, 0, 3])\n")
    bwd = gradir.grad(fwd, wrt=["t0", "t1"])
    exe = gradir.compile(bwd)
    (step,) = [st for st in exe.plan.steps if st.op.op_name == "Chunked"]
    assert step.inplace and all(exe.plan.types[step.results[j]] == exe.plan.types[step.operands[i]]
                                for j, i in step.inplace.items())
    assert "reuses" in exe.plan.describe()
    x = _head_inputs(exe.graph)
    got = [exe.run(x) for _ in range(2)]
    monkeypatch.setitem(KERNELS, ChunkedOp, dataclasses.replace(KERNELS[ChunkedOp], donate=None))
    fresh = gradir.compile(bwd)
    assert not any(st.inplace for st in fresh.plan.steps if st.op.op_name == "Chunked")
    want = fresh.run(x)
    for g in got:
        for k in want:
            assert np.array_equal(g[k], want[k]), k
