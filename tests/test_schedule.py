"""Scheduling over the cores: blocked products, cores given per step at run time, the critical
path first, and results that are the same bits whatever each step was given."""

from __future__ import annotations

import os
import random
import threading

import numpy as np
import threadpoolctl
import pytest

import gradir
from gradir.backends.cpu import policy
from gradir.backends.cpu.kernels import KERNELS, KernelInfo, blocked, jit, parallel
from gradir.cli.run import demo_inputs


def _bits(a: np.ndarray) -> bytes:
    return a.dtype.str.encode() + repr(a.shape).encode() + a.tobytes()


# -- blocked products ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("a_shape, b_shape, axis", [
    ((1024, 300), (300, 200), "rows"),  # 2-D, split by rows
    ((4, 1, 200, 160), (160, 96), "rows"),  # batch dims flattened into the rows
    ((64, 700), (700, 1024), "cols"),  # few rows: split by columns
    ((8, 1, 128, 64), (8, 1, 64, 512), "batch"),  # batched right operand: split by batch
    ((8, 3, 128, 64), (1, 3, 64, 512), "batch"),  # the right operand broadcast along the split
    ((5, 7), (7, 3), ""),  # small: one call
])
@pytest.mark.parametrize("packed", [False, True])
def test_blocked_matmul_bits_do_not_depend_on_the_cores(monkeypatch, dtype, a_shape, b_shape, axis, packed):
    """Every allotment of cores (1-4, and blocks taken in any order) gives the same bits, close
    to NumPy's product; a batch split gives exactly single-threaded NumPy's bits.  ``packed``:
    row blocks by the packed-panel kernel (as on CPUs where it beats BLAS), whatever this CPU."""
    monkeypatch.setattr(blocked, "MIN_BLOCK_FLOPS", 1)  # split even these small products
    monkeypatch.setattr(blocked, "MIN_BLOCK_ROWS", 64)
    jg = jit.load("gemm")
    calls = []
    if jg is not None:
        monkeypatch.setattr(jg, "FAST_LARGE", packed)
        real_gemm = jg.gemm
        monkeypatch.setattr(jg, "gemm", lambda *args: (calls.append(1), real_gemm(*args))[1])
    assert blocked.partition(a_shape, b_shape)[0] == axis
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    with parallel.cores(1):
        ref = blocked.matmul(a, b)
    for n in (2, 3, 4):
        with parallel.cores(n):
            got = blocked.matmul(a, b, out=np.full_like(ref, np.nan))
        assert _bits(got) == _bits(ref), n
    # blocks taken in reverse order, one thread
    real = parallel.run_blocks
    monkeypatch.setattr(parallel, "run_blocks", lambda n, body: [body(i) for i in reversed(range(n))])
    assert _bits(blocked.matmul(a, b)) == _bits(ref)
    monkeypatch.setattr(parallel, "run_blocks", real)
    with parallel.blas_limit(1):
        whole = np.matmul(a, b)
    np.testing.assert_allclose(ref, whole, rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-4)
    if axis in ("batch", ""):
        assert _bits(ref) == _bits(whole)
    assert bool(calls) == (packed and axis == "rows" and jg is not None), calls


def test_the_fast_gemm_choice_can_be_overridden():
    """``GRADIR_FAST_GEMM=0/1`` decides which kernel the LSTM loops and row blocks use."""
    import subprocess
    import sys
    code = "from gradir.backends.cpu.kernels import _jit_gemm as g; print(g.FAST_LARGE)"
    for flag, want in (("0", "False"), ("1", "True")):
        env = dict(os.environ, GRADIR_FAST_GEMM=flag)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == want, out.stderr


def test_a_reduction_of_a_large_operand_is_not_tiny():
    """A bias gradient's ReduceSumTo writes little but reads much: it gets a core of its own
    rather than running beside a product on both cores (``schedule._is_tiny``)."""
    g = gradir.parse("input t0 : Float32 [512, 1024]\ninput t1 : Float32 [1024]\n"
                     "input t2 : Float32 [4, 8]\ninput t3 : Float32 [8]\n"
                     "t4 = ReduceSumTo(t0, t1) : Float32 [1024]\nt5 = ReduceSumTo(t2, t3) : Float32 [8]\n"
                     "output t4\noutput t5\n")
    steps = {st.results[0]: st for st in gradir.compile(g, threads=2).plan.steps}
    assert not steps["t4"].tiny and steps["t5"].tiny


def test_blocked_matmul_partition_is_a_power_of_two_of_aligned_blocks():
    axis, n = blocked.partition((6400, 256), (256, 512))
    assert axis == "rows" and n == blocked.MAX_BLOCKS
    assert blocked.partition((256, 6400), (6400, 512)) == ("cols", 2)
    # blocks of at least 512 rows / 2048 columns where the shapes allow 2 (each block repacks
    # the operand the blocks share), and wide short products in column blocks
    assert blocked.partition((1024, 512), (512, 1024)) == ("rows", 2)
    assert blocked.partition((512, 1024), (1024, 4096)) == ("cols", 2)
    assert blocked.partition((512, 4096), (4096, 1024)) == ("rows", 2)
    assert blocked.partition((4096, 512), (512, 1024)) == ("rows", 8)
    assert blocked.partition((64, 64), (64, 64)) == ("", 1)
    edges = blocked._bounds(1000, 4, 16)
    assert edges[0] == 0 and edges[-1] == 1000 and all(e % 16 == 0 for e in edges[:-1])


def test_blocked_matmul_edge_shapes():
    """Vectors, empty dimensions and non-contiguous operands give np.matmul's results."""
    rng = np.random.default_rng(1)
    cases = [((5,), (5, 3)), ((4, 5), (5,)), ((5,), (5,)), ((0, 5), (5, 3)), ((3, 0), (0, 4))]
    for sa, sb in cases:
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        np.testing.assert_allclose(blocked.matmul(a, b), np.matmul(a, b))
    a = rng.standard_normal((900, 700)).astype(np.float32)
    b = rng.standard_normal((600, 700)).astype(np.float32)
    with parallel.cores(2):
        got = blocked.matmul(a, b.T)  # a transposed view
    np.testing.assert_allclose(got, a @ b.T, rtol=1e-4, atol=1e-3)


def test_run_blocks_raises_a_blocks_error_after_every_helper_is_done():
    done = []

    def body(i: int) -> None:
        if i == 1:
            raise ValueError("block 1")
        done.append(i)

    with parallel.cores(3), pytest.raises(ValueError, match="block 1"):
        parallel.run_blocks(6, body)
    assert 1 not in done


# -- whole graphs: the same bits for every thread count and every allotment ------------------
TWO_BRANCHES = """input t0 : Float32 [768, 512]
input t1 : Float32 [512, 512]
input t2 : Float32 [768, 512]
input t3 : Float32 [512, 512]
t4 = MatMul(t0, t1)
t5 = Tanh(t4)
t6 = MatMul(t5, t1)
t7 = MatMul(t2, t3)
t8 = Sigmoid(t7)
t9 = MatMul(t8, t3)
t10 = Add(t6, t9)
output t10, t6, t9
"""


def _lstm_branches(H: int = 260, B: int = 16) -> str:
    return f"""input t0 : Float32 [3, {B}, 8]
input t1 : Float32 [1, {4 * H}, 8]
input t2 : Float32 [1, {4 * H}, {H}]
input t3 : Float32 [3, 1, {B}, {H}]
input t20 : Float32 [3, {B}, 8]
input t21 : Float32 [1, {4 * H}, 8]
input t22 : Float32 [1, {4 * H}, {H}]
input t30 : Float32 [1024, 384]
input t31 : Float32 [384, 256]
t4, t5, t6, t7, t8 = LSTMTraining(t0, t1, t2, hidden_size={H})
t9, t10, t11, t12, t13, t14, t15 = LSTMGrad(t0, t1, t2, _, _, _, t4, t7, t8, t3, hidden_size={H})
t24, t25, t26, t27, t28 = LSTMTraining(t20, t21, t22, hidden_size={H})
t29, t40, t41, t42, t43, t44, t45 = LSTMGrad(t20, t21, t22, _, _, _, t24, t27, t28, t3, hidden_size={H})
t32 = MatMul(t30, t31)
output t4, t9, t10, t11, t24, t29, t40, t41, t32
"""


@pytest.mark.parametrize("text", [TWO_BRANCHES, _lstm_branches()], ids=["matmuls", "lstm"])
@pytest.mark.parametrize("allot", ["free", "one", "all", "random"])
def test_two_heavy_branches_same_bits_for_threads_and_allotments(monkeypatch, text, allot):
    """Independent heavy branches (products, LSTM layers) on 1, 2 and 4 threads, each step
    given the free cores, one core, every core, or a random number up to 4 (more than are
    free too): every result the same bits as one thread's and the reference backend's."""
    monkeypatch.setattr(parallel, "_idle_sleep", True)  # LSTM halves as where gradir is imported first
    rnd = random.Random(3)
    if allot == "one":
        monkeypatch.setattr(policy, "grant", lambda step, free: 1)
    elif allot == "all":
        monkeypatch.setattr(policy, "grant", lambda step, free: 4)
    elif allot == "random":
        monkeypatch.setattr(policy, "grant", lambda step, free: rnd.randint(1, 4))
    g = gradir.parse(text)
    inputs = demo_inputs(g, 11)
    ref = gradir.compile(g, backend="reference").run(inputs)
    for threads in (1, 2, 4):
        exe = gradir.compile(g, threads=threads)
        assert exe.plan.heavy_concurrency and exe.plan.blas
        for _ in range(2):
            for trace in (None, []):  # the straight-line code (threads=1) and the dataflow executor
                out = exe.run(inputs, trace=trace)
                for k in ref:
                    assert _bits(out[k]) == _bits(ref[k]), (threads, allot, k)


# -- the cores each step gets ------------------------------------------------------------------
def _spy(monkeypatch, name: str, seen: list) -> None:
    real = KERNELS[name]

    def fn(*a, **kw):  # type: ignore[no-untyped-def]
        seen.append((name, parallel.threads_here(), parallel.blas_threads()))
        return real.fn(*a, **kw)

    monkeypatch.setitem(KERNELS, name, KernelInfo(name, fn, inplace=real.inplace, blas=real.blas,
                                                  ufunc=None, splits=real.splits))


def test_a_step_that_may_run_beside_another_gets_every_core_when_it_starts_first(monkeypatch):
    """A large MatMul that a Tanh may run beside starts first (its path is longer) and gets
    both cores; the Tanh waits for a free core.  BLAS is held to one thread inside the run
    and restored after it; the process default of kernel threads is left alone."""
    text = ("input t0 : Float32 [2048, 512]\ninput t1 : Float32 [512, 512]\ninput t2 : Float32 [512, 512]\n"
            "t3 = MatMul(t0, t1)\nt4 = Tanh(t2)\nt5 = MatMul(t3, t4)\noutput t5\n")
    seen: list = []
    _spy(monkeypatch, "MatMul", seen)
    exe = gradir.compile(text, threads=2)
    plan = exe.plan
    assert plan.heavy_concurrency and plan.steps[0].width >= 2 and not plan.steps[1].tiny
    assert plan.steps[0].priority > plan.steps[1].priority
    before_blas, before_default = parallel.blas_threads(), parallel.get_threads()
    trace: list = []
    exe.run(demo_inputs(gradir.parse(text), 0), trace=trace)
    ev = {e["args"]["results"]: e for e in trace}
    assert ev["t3"]["args"]["cores"] == 2 and ev["t3"]["ts"] < ev["t4"]["ts"]
    assert ev["t4"]["ts"] >= ev["t3"]["ts"] + ev["t3"]["dur"] - 1  # no free core before t3 ended
    assert seen[0] == ("MatMul", 2, 1)
    assert parallel.blas_threads() == before_blas and parallel.get_threads() == before_default


def test_cores_in_use_never_exceed_the_threads(monkeypatch):
    """Over a graph of many heavy steps, the cores held by steps running at once (from the
    trace) never add up to more than ``threads``."""
    g = gradir.parse(TWO_BRANCHES)
    inputs = demo_inputs(g, 2)
    for threads in (2, 3):
        trace: list = []
        gradir.compile(g, threads=threads).run(inputs, trace=trace)
        heavy = [e for e in trace if e["args"]["cores"] >= 1]
        for e in heavy:
            t = e["ts"] + e["dur"] / 2
            at_once = sum(f["args"]["cores"] for f in heavy if f["ts"] <= t < f["ts"] + f["dur"])
            assert at_once <= threads, (threads, e)


def test_a_run_gives_its_steps_its_own_thread_count_beside_another_run(monkeypatch):
    """Two runs at once on two threads, with 1 and 3 threads: each step sees its own run's
    cores (a per-thread setting, not a process global)."""
    seen: list = []
    lock = threading.Lock()
    real = KERNELS["Tanh"]

    def fn(*a, **kw):  # type: ignore[no-untyped-def]
        with lock:
            seen.append((threading.current_thread().name, parallel.threads_here()))
        return real.fn(*a, **kw)

    monkeypatch.setitem(KERNELS, "Tanh", KernelInfo("Tanh", fn, inplace=True, splits=True))
    text = "input t0 : Float32 [2048, 1024]\nt1 = Tanh(t0)\nt2 = Tanh(t1)\noutput t2\n"
    x = np.ones((2048, 1024), np.float32)
    exes = {"one": gradir.compile(text, threads=1), "three": gradir.compile(text, threads=3)}
    barrier = threading.Barrier(2)

    def work(name: str) -> None:
        barrier.wait()
        for _ in range(20):
            exes[name].run({"t0": x})

    ts = [threading.Thread(target=work, args=(n,), name=n) for n in exes]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert {n for n, _ in seen} == {"one", "three"}
    assert all(c == (1 if n == "one" else 3) for n, c in seen), set(seen)


# -- the critical path first ---------------------------------------------------------------
CRITICAL = """input t0 : Float32 [512, 512]
input t1 : Float32 [512, 512]
t2 = MatMul(t0, t1)
t3 = MatMul(t1, t0)
t4 = MatMul(t3, t1)
t5 = MatMul(t4, t1)
t6 = Add(t2, t5)
output t6
"""


def test_the_critical_path_starts_first():
    """A short branch (one product) written first and a long one (three products): the plan
    ranks the long branch's first step above it, and with two threads that step starts first,
    on both cores, and the short one waits for it."""
    exe = gradir.compile(CRITICAL, threads=2)
    plan = exe.plan
    names = {st.results[0]: st for st in plan.steps}
    assert names["t3"].priority > names["t2"].priority
    assert [plan.steps[k].results[0] for k in plan.critical_path()] == ["t3", "t4", "t5", "t6"]
    assert "critical path" in plan.describe()
    inputs = demo_inputs(gradir.parse(CRITICAL), 5)
    for _ in range(3):
        trace: list = []
        exe.run(inputs, trace=trace)
        order = [e["args"]["results"] for e in sorted(trace, key=lambda e: e["ts"])]
        assert order[0] == "t3", order
        assert order.index("t2") > order.index("t3")


def test_priorities_are_the_longest_remaining_path():
    plan = gradir.compile(CRITICAL, threads=2).plan
    by = {st.results[0]: st for st in plan.steps}
    assert by["t6"].priority == pytest.approx(by["t6"].cost)
    assert by["t5"].priority == pytest.approx(by["t5"].cost + by["t6"].priority)
    assert by["t3"].priority == pytest.approx(by["t3"].cost + by["t4"].cost + by["t5"].cost + by["t6"].cost)
    assert all(st.cost > 0 for st in plan.steps)


def test_equal_branches_share_the_cores():
    """Two equal element-wise branches: the first step to start leaves a core to the other,
    about as critical (side by side on one core each, not one after the other on both).
    Products do not: their blocks scale with the cores, so one at a time gets every core."""
    text = ("input t0 : Float32 [2048, 1024]\ninput t1 : Float32 [2048, 1024]\n"
            "t2 = Tanh(t0)\nt3 = Neg(t1)\nt4 = Add(t2, t3)\noutput t4\n")
    for graph, cores in ((text, 1), (TWO_BRANCHES, 2)):
        exe = gradir.compile(graph, threads=2, disable=["fuse-elementwise"])
        first_two = [st for st in exe.plan.steps if not st.deps][:2]
        assert all(st.width >= 2 for st in first_two)
        assert first_two[0].priority == pytest.approx(first_two[1].priority)
        inputs = demo_inputs(gradir.parse(graph), 1)
        for _ in range(3):
            trace: list = []
            exe.run(inputs, trace=trace)
            first = min(trace, key=lambda e: e["ts"])
            assert first["args"]["results"] in {st.results[0] for st in first_two}
            assert first["args"]["cores"] == cores, graph


def test_a_short_side_step_waits_for_the_critical_paths_next_wide_step():
    """``_defer``: a side step much less critical than a running step waits when a step after
    the running one can use several cores and the side step would outlast the running one;
    it runs at once when nothing wide follows, or when it would end first."""
    import time
    from types import SimpleNamespace as S
    now = time.perf_counter()
    crit = S(priority=1.0, cost=0.010, width=1)  # a short step on the critical path, running
    wide, narrow = S(priority=0.9, cost=0.5, width=8), S(priority=0.9, cost=0.5, width=1)
    side = S(priority=0.2, cost=0.05, width=1)
    brief = S(priority=0.2, cost=0.001, width=1)
    steps = [crit, wide, narrow]
    assert policy.defer(side, {0: (now, 1)}, steps, [[1], [], []])
    assert not policy.defer(side, {0: (now, 1)}, steps, [[2], [], []])  # nothing wide follows
    assert not policy.defer(brief, {0: (now, 1)}, steps, [[1], [], []])  # ends first
    assert not policy.defer(S(priority=0.6, cost=0.05, width=1), {0: (now, 1)}, steps, [[1], [], []])


def test_small_products_have_the_same_bits_with_blas_on_any_thread_count():
    """``blocked.matmul`` does not hold BLAS for a product OpenBLAS runs on one thread anyway
    (m·n·k <= SINGLE_THREADED_MNK): check that premise on this machine's BLAS."""
    from gradir.backends.cpu.kernels import blocked, parallel
    rng = np.random.default_rng(7)
    shapes = [(40, 48, 128), (64, 64, 64), (2, 256, 512), (100, 50, 52), (7, 33, 1000)]
    for m, k, n in shapes:
        assert m * k * n <= blocked.SINGLE_THREADED_MNK
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        with parallel.blas_limit(1):
            one = np.matmul(a, b)
        with threadpoolctl.threadpool_limits(4, user_api="blas"):
            many = np.matmul(a, b)
            mine = blocked.matmul(a, b)
        assert one.tobytes() == many.tobytes() == mine.tobytes(), (m, k, n)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2
                    or parallel.current_cpu() < 0, reason="needs 2 CPUs and affinity calls (Linux)")
def test_threads_of_a_parallel_section_are_pinned_to_different_cpus_and_unpinned_after():
    seen = {}
    barrier = threading.Barrier(2)

    def thread(name: str) -> None:
        mask = os.sched_getaffinity(0)
        with parallel.pinned() as cpu:
            with parallel.pinned() as inner:  # nested: stays where it is
                seen[name + " inner"] = inner
            barrier.wait()  # both pinned at once
            seen[name] = (cpu, os.sched_getaffinity(0), parallel.current_cpu())
            barrier.wait()
        seen[name + " after"] = (os.sched_getaffinity(0), mask)

    ts = [threading.Thread(target=thread, args=(n,)) for n in ("a", "b")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    (ca, ma, ra), (cb, mb, rb) = seen["a"], seen["b"]
    assert ca != cb and ma == {ca} and mb == {cb} and ra == ca and rb == cb
    assert seen["a inner"] == ca and seen["b inner"] == cb
    assert seen["a after"][0] == seen["a after"][1] and seen["b after"][0] == seen["b after"][1]
    from gradir.backends.cpu.kernels import cpus
    assert cpus._claims == {}  # the claims are given back


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) != 2
                    or parallel.current_cpu() < 0, reason="needs exactly 2 CPUs and affinity calls (Linux)")
def test_a_thread_finding_every_cpu_held_is_not_pinned_and_takes_no_claim():
    from gradir.backends.cpu.kernels import cpus
    got = []
    hold, go = threading.Event(), threading.Event()

    def holder() -> None:
        with parallel.pinned():
            hold.set()
            go.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    hold.wait(10)
    with parallel.pinned():  # this thread takes the other CPU
        before = dict(cpus._claims)
        def third_thread() -> None:
            parallel.unpinned_thread()  # a new thread inherits this pinned one's mask
            got.append((parallel.pinned().__enter__(), os.sched_getaffinity(0)))
        third = threading.Thread(target=third_thread)
        third.start()
        third.join()
        assert dict(cpus._claims) == before and len(got[0][1]) == 2  # not pinned, nothing claimed
    go.set()
    t.join()
    assert cpus._claims == {}


def test_parallel_sections_give_the_same_bits_and_leave_no_thread_pinned():
    x = np.random.default_rng(0).standard_normal((4096, 512)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32)
    mask = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    with parallel.cores(2):
        a = blocked.matmul(x, w)  # two blocks on two pinned threads
    with parallel.cores(1):
        b = blocked.matmul(x, w)  # the same blocks, one after the other
    assert blocked.partition(x.shape, w.shape)[1] >= 2
    assert np.array_equal(a, b)
    if mask is not None:
        assert os.sched_getaffinity(0) == mask


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs 2 CPUs and affinity calls (Linux)")
def test_a_pool_thread_started_by_a_pinned_thread_may_use_every_cpu():
    from concurrent.futures import ThreadPoolExecutor
    with parallel.pinned():
        assert len(os.sched_getaffinity(0)) == 1
        with ThreadPoolExecutor(1, initializer=parallel.unpinned_thread) as pool:
            assert pool.submit(os.sched_getaffinity, 0).result() == set(parallel.ALLOWED_CPUS)
        with ThreadPoolExecutor(1) as pool:  # what it guards against: the mask is inherited
            assert len(pool.submit(os.sched_getaffinity, 0).result()) == 1


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs 2 CPUs and affinity calls (Linux)")
def test_pinning_can_be_turned_off_from_the_environment():
    import subprocess
    import sys
    code = ("import os; from gradir.backends.cpu.kernels import cpus, parallel; m = os.sched_getaffinity(0)\n"
            "with parallel.pinned(): print(os.sched_getaffinity(0) == m, cpus.PIN)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "GRADIR_PIN_THREADS": "0"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"]


def test_views_and_products_come_from_the_ops_traits(monkeypatch):
    """The schedule runs an op as a view because its class says ``VIEW``, and the cost model counts an op's
    FLOPs because it says ``PRODUCT``: no lists of op names in the middle."""
    from gradir import OPS, DType, TensorType
    from gradir.transforms import cost
    text = "input t0 : Float32 [8, 8]\nt1 = Exp(t0)\nt2 = Reshape(t1, shape=[64])\nt3 = MatMul(t2, t2)\noutput t3\n"
    assert [st.results[0] for st in gradir.compile(text).plan.steps if st.view] == ["t2"]
    monkeypatch.setattr(OPS["Reshape"], "VIEW", False)
    assert not any(st.view for st in gradir.compile(text).plan.steps)
    a, b, c = (TensorType(DType.Float32, s) for s in ((4, 8), (8, 2), (4, 2)))
    assert cost.flops("MatMul", [a, b], [c], {}) == 2 * 4 * 2 * 8
    monkeypatch.setattr(OPS["MatMul"], "PRODUCT", False)
    assert cost.flops("MatMul", [a, b], [c], {}) == 0


def test_a_freed_view_does_not_free_its_buffer_twice():
    """A view (``Reshape``) has no bytes of its own: freeing it after its last reader must not take its
    bytes off the plan again (the input it views stays live; the intermediate it views is freed once)."""
    exe = gradir.compile("input t0 : Float32 [64, 1024]\ninput t1 : Float32 [1024, 8]\n"
                         "t2 = Reshape(t0, shape=[64, 1, 1024])\nt3 = ReduceSum(t2, axes=[1])\n"
                         "t4 = Exp(t0)\nt5 = Reshape(t4, shape=[65536])\nt6 = ReduceSum(t5)\n"
                         "t7 = MatMul(t0, t1)\noutput t3, t6, t7\n", threads=1)
    inputs = 64 * 1024 * 4 + 1024 * 8 * 4
    # while the last step runs: the inputs, t3 and t6 (outputs), and t7; t4 (256 KiB) freed once
    assert exe.plan.curve[-1] == inputs + 64 * 1024 * 4 + 4 + 64 * 8 * 4
    assert min(exe.plan.curve) >= inputs
