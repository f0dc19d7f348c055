"""LSTM kernel benchmark: gradir's LSTMGrad (float32) against a plain NumPy BPTT, PyTorch's
nn.LSTM backward (when torch is importable) and a float32 GEMM roof, all measured in the
same run; plus a graph of all six GradLSTMCellInput ops (fused by the compiler) against a
graph with one, both run by the runtime.

    python benchmarks/bench_lstm.py [--repeats N]

gradir's rows are shown with its compiled kernels (numba, "JIT on") and with its NumPy
kernels ("JIT off", as with GRADIR_JIT=0); goals are judged on the default (JIT on
when numba is available).

Times are the minimum over several repeats, taken in three alternating rounds
(docs/performance.md: these machines are noisy; compare ratios from one run).  gradir writes
into preallocated outputs, as the runtime's buffer plan does.  Goals (issue "[lstm]"):

* S,B,I,H = 100,64,256,256: LSTMGrad faster than PyTorch's backward, and at least 70% of
  the float32 GEMM roof (backward GEMM work is 16·S·B·H·(I+H) FLOPs).
* S,B,I,H = 10,4,16,32: LSTMGrad at most half of PyTorch's backward time.
* A graph with all six GradLSTMCellInput indices at most 1.5x a graph with one (the mean
  over the six single-index graphs; the ratio to the dearest one is shown as info).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# gradir before NumPy, as the gradir command does: it shortens OpenBLAS's idle-thread spin
# (gradir._blasenv), which OpenBLAS reads when NumPy loads it.
from gradir.backends.cpu.kernels import jit, parallel  # noqa: E402,I001
from gradir.backends.cpu.kernels.lstm import lstm_grad, lstm_training

import numpy as np  # noqa: E402

SHAPES = [(100, 64, 256, 256), (10, 4, 16, 32)]
CELL_SHAPES = [(4, 16, 32), (64, 256, 256)]


def best_time(fn: Callable[[], object], repeats: int, budget: float = 0.25) -> float:
    """Minimum seconds per call over ``repeats`` rounds of enough calls to fill ``budget``."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, min(2000, int(budget / repeats / once)))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def make_problem(S: int, B: int, I: int, H: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    f = np.float32
    ops = {
        "X": rng.standard_normal((S, B, I), dtype=f),
        "W": (rng.standard_normal((1, 4 * H, I), dtype=f) / np.sqrt(I)).astype(f),
        "R": (rng.standard_normal((1, 4 * H, H), dtype=f) / np.sqrt(H)).astype(f),
        "B": (0.1 * rng.standard_normal((1, 8 * H), dtype=f)).astype(f),
    }
    HAll, _, _, CAll, iofc = lstm_training(ops["X"], ops["W"], ops["R"], ops["B"], hidden_size=H)
    ops.update(HAll=HAll, CAll=CAll, iofc=iofc, dHAll=rng.standard_normal(HAll.shape, dtype=f))
    return ops


def gradir_backward(ops: dict, H: int) -> Callable[[], tuple]:
    S, B, I = ops["X"].shape
    f = np.float32
    outs = (np.empty((S, B, I), f), np.empty((1, 4 * H, I), f), np.empty((1, 4 * H, H), f),
            np.empty((1, 8 * H), f), np.empty((1, B, H), f), np.empty((1, B, H), f), np.empty((1, 3 * H), f))

    def run() -> tuple:
        return lstm_grad(ops["X"], ops["W"], ops["R"], None, None, None, ops["HAll"], ops["CAll"], ops["iofc"],
                         ops["dHAll"], None, None, None, hidden_size=H, out=outs)

    return run


def gradir_forward(ops: dict, H: int) -> Callable[[], object]:
    """LSTMTraining on the problem's operands (its results are not used)."""
    return lambda: lstm_training(ops["X"], ops["W"], ops["R"], ops["B"], hidden_size=H)


def time_after(before: Callable[[], object], fn: Callable[[], object], repeats: int) -> float:
    """Minimum seconds of ``fn`` called right after ``before`` (a training step's order: BLAS's
    threads have just run, which is where their idle spinning can take a core)."""
    best = float("inf")
    for _ in range(repeats):
        before()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def plain_numpy_backward(ops: dict, H: int, per_gate: bool = False) -> Callable[[], tuple]:
    """A plain BPTT: per step a handful of NumPy expressions and one GEMM (da·R, all four gate
    blocks at once), then dX, dW, dR as three big GEMMs over all steps.  This is
    the "plain NumPy BPTT" anchor measured on these machines; it skips dP, dH0, dC0 (gradir computes them).
    With ``per_gate`` the per-step GEMM is done per gate block (four smaller GEMMs)."""
    X, W, R = ops["X"], ops["W"][0], ops["R"][0]
    HAll, CAll, G, dHAll = ops["HAll"][:, 0], ops["CAll"][:, 0], ops["iofc"][:, 0], ops["dHAll"][:, 0]
    S, B, I = X.shape

    def run() -> tuple:
        da = np.empty((S, B, 4 * H), X.dtype)
        dh = np.zeros((B, H), X.dtype)
        dc = np.zeros((B, H), X.dtype)
        for t in range(S - 1, -1, -1):
            i, o, f, c = G[t, :, :H], G[t, :, H:2 * H], G[t, :, 2 * H:3 * H], G[t, :, 3 * H:]
            c_prev = CAll[t - 1] if t > 0 else np.zeros_like(dc)
            dh = dh + dHAll[t]
            tau = np.tanh(CAll[t])
            da[t, :, H:2 * H] = dh * tau * o * (1 - o)
            dc = dc + dh * o * (1 - tau * tau)
            da[t, :, :H] = dc * c * i * (1 - i)
            da[t, :, 2 * H:3 * H] = dc * c_prev * f * (1 - f)
            da[t, :, 3 * H:] = dc * i * (1 - c * c)
            dc = dc * f
            if per_gate:
                dh = sum(da[t, :, k * H: (k + 1) * H] @ R[k * H: (k + 1) * H] for k in range(4))
            else:
                dh = da[t] @ R
        da2 = da.reshape(S * B, 4 * H)
        dX = (da2 @ W).reshape(S, B, I)
        dW = da2.T @ X.reshape(S * B, I)
        dR = da2[B:].T @ HAll[:-1].reshape((S - 1) * B, H)
        db = da2.sum(axis=0)
        return dX, dW, dR, np.concatenate([db, db]), dh, dc

    return run


def torch_backward(ops: dict, H: int, threads: int):
    """PyTorch nn.LSTM with the same weights (ONNX i,o,f,c mapped to i,f,g,o); times backward only."""
    try:
        import torch
    except ImportError:
        return None, None
    torch.set_num_threads(threads)
    I = ops["X"].shape[2]
    perm = np.concatenate([np.arange(k * H, (k + 1) * H) for k in (0, 2, 3, 1)])  # torch i,f,g,o <- ONNX
    lstm = torch.nn.LSTM(I, H)
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.from_numpy(ops["W"][0][perm]))
        lstm.weight_hh_l0.copy_(torch.from_numpy(ops["R"][0][perm]))
        lstm.bias_ih_l0.copy_(torch.from_numpy(ops["B"][0, : 4 * H][perm]))
        lstm.bias_hh_l0.copy_(torch.from_numpy(ops["B"][0, 4 * H:][perm]))
    x = torch.from_numpy(ops["X"]).clone().requires_grad_(True)
    y, _ = lstm(x)
    dy = torch.from_numpy(ops["dHAll"][:, 0]).clone()
    params = [x, lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0]

    def run():
        return torch.autograd.grad(y, params, dy, retain_graph=True)

    return run, torch.__version__


def gemm_roof(S: int, B: int, I: int, H: int) -> tuple[Callable[[], object], float]:
    """A float32 (S·B)×(I+H) by (I+H)×4H GEMM (the backward's GEMM work in one piece) and its FLOPs."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((S * B, I + H), dtype=np.float32)
    b = rng.standard_normal((I + H, 4 * H), dtype=np.float32)
    c = np.empty((S * B, 4 * H), np.float32)
    return (lambda: np.matmul(a, b, out=c)), 2.0 * S * B * (I + H) * 4 * H


def check_agreement(ours: tuple, plain: tuple, torch_grads) -> str:
    dX, dW, dR = ours[0], ours[1][0], ours[2][0]
    err = max(float(np.abs(dX - plain[0]).max()), float(np.abs(dW - plain[1]).max()),
              float(np.abs(dR - plain[2]).max()))
    msg = f"max |gradir - plain| = {err:.1e}"
    if torch_grads is not None:
        msg += f", max |gradir dX - torch dX| = {float(np.abs(dX - torch_grads[0].numpy()).max()):.1e}"
    return msg


def bench_layer(S: int, B: int, I: int, H: int, repeats: int, threads: int) -> list[tuple]:
    ops = make_problem(S, B, I, H)
    ours, plain = gradir_backward(ops, H), plain_numpy_backward(ops, H)
    plain4 = plain_numpy_backward(ops, H, per_gate=True)
    torch_run, torch_version = torch_backward(ops, H, threads)
    print(f"\n## LSTMGrad float32, S={S} B={B} I={I} H={H} (forward direction, dHAll only)")
    print("   " + check_agreement(tuple(a.copy() for a in ours()), plain(),
                                  torch_run() if torch_run is not None else None))
    budget = 1.0 if S * B * H > 100000 else 0.3
    roof_run, roof_flops = gemm_roof(S, B, I, H)
    t_ours = t_numpy = t_plain = t_plain4 = t_torch = t_roof = t_after = float("inf")
    use_jit = jit.enabled()
    forward = gradir_forward(ops, H)
    for _ in range(3):  # alternate blocks of repeats to spread the machine's noise
        t_roof = min(t_roof, best_time(roof_run, repeats, budget / 2))
        t_ours = min(t_ours, best_time(ours, repeats, budget))
        t_after = min(t_after, time_after(forward, ours, repeats))
        if use_jit:
            with jit.disabled():
                t_numpy = min(t_numpy, best_time(ours, repeats, budget))
        t_plain = min(t_plain, best_time(plain, repeats, budget))
        t_plain4 = min(t_plain4, best_time(plain4, repeats, budget))
        if torch_run is not None:
            t_torch = min(t_torch, best_time(torch_run, repeats, budget))
    flops = 16 * S * B * H * (I + H)
    roof = roof_flops / t_roof / 1e9
    gflops = flops / t_ours / 1e9
    rows = [(f"gradir LSTMGrad (JIT {'on' if use_jit else 'off'})", t_ours),
            ("gradir LSTMGrad right after LSTMTraining", t_after)]
    if use_jit:
        rows.append(("gradir LSTMGrad (JIT off: NumPy kernels)", t_numpy))
    rows += [("plain NumPy BPTT (1 GEMM per step)", t_plain),
            ("plain NumPy BPTT (1 GEMM per step per gate block)", t_plain4)]
    if torch_run is not None:
        rows.append((f"PyTorch {torch_version} nn.LSTM backward ({threads} threads)", t_torch))
    for name, t in rows:
        print(f"   {name:<52s} {t * 1e3:9.3f} ms  {flops / t / 1e9:7.1f} GFLOP/s  x{t / t_ours:5.2f} of gradir")
    print(f"   float32 GEMM roof ({S * B}x{I + H} by {I + H}x{4 * H}) {roof:7.1f} GFLOP/s; "
          f"gradir reaches {100 * gflops / roof:5.1f}% of it")
    goals = []
    if (S, B, I, H) == (100, 64, 256, 256):
        if torch_run is not None:
            goals.append((f"{S},{B},{I},{H}: faster than PyTorch backward", f"{t_ours / t_torch:.2f}x PyTorch",
                          t_ours < t_torch))
        goals.append((f"{S},{B},{I},{H}: >= 70% of GEMM roof", f"{100 * gflops / roof:.0f}%", gflops >= 0.7 * roof))
    else:
        if torch_run is not None:
            goals.append((f"{S},{B},{I},{H}: <= 0.5x PyTorch backward time", f"{t_ours / t_torch:.2f}x PyTorch",
                          t_ours <= 0.5 * t_torch))
    goals.append((f"{S},{B},{I},{H}: LSTMGrad right after LSTMTraining / alone", f"{t_after / t_ours:.2f}x", None))
    if use_jit:
        goals.append((f"{S},{B},{I},{H}: JIT off time / JIT on", f"{t_numpy / t_ours:.2f}x", None))
        if torch_run is not None:
            goals.append((f"{S},{B},{I},{H}: JIT off: time / PyTorch's", f"{t_numpy / t_torch:.2f}x", None))
        goals.append((f"{S},{B},{I},{H}: JIT off: % of GEMM roof", f"{100 * flops / t_numpy / 1e9 / roof:.0f}%",
                      None))
    goals.append((f"{S},{B},{I},{H}: plain BPTT (1 GEMM/step) time / gradir's", f"{t_plain / t_ours:.2f}x", None))
    goals.append((f"{S},{B},{I},{H}: plain BPTT (GEMM per gate) time / gradir's", f"{t_plain4 / t_ours:.2f}x",
                  None))
    goals += bench_forward(ops, S, B, I, H, repeats, threads, budget)
    return goals


def bench_forward(ops: dict, S: int, B: int, I: int, H: int, repeats: int, threads: int,
                  budget: float) -> list[tuple]:
    """LSTMTraining (the forward, which also stores what the backward needs) against PyTorch's
    nn.LSTM forward without autograd: information, no goal."""
    def ours() -> object:
        return lstm_training(ops["X"], ops["W"], ops["R"], ops["B"], hidden_size=H)

    try:
        import torch
    except ImportError:
        torch = None
    t_ours = t_torch = float("inf")
    if torch is not None:
        torch.set_num_threads(threads)
        lstm = torch.nn.LSTM(I, H)
        x = torch.from_numpy(ops["X"])

        def theirs() -> object:
            with torch.no_grad():
                return lstm(x)
    for _ in range(3):
        t_ours = min(t_ours, best_time(ours, repeats, budget))
        if torch is not None:
            t_torch = min(t_torch, best_time(theirs, repeats, budget))
    line = f"   forward: gradir LSTMTraining {t_ours * 1e3:.3f} ms"
    out = []
    if torch is not None:
        line += f", PyTorch nn.LSTM forward (no autograd) {t_torch * 1e3:.3f} ms"
        out.append((f"{S},{B},{I},{H}: forward LSTMTraining time / PyTorch's", f"{t_ours / t_torch:.2f}x", None))
    print(line)
    return out


def _cell_graph(B: int, I: int, H: int, indices: list[int]) -> str:
    """A graph of GradLSTMCellInput ops over the same operands (the compiler fuses siblings)."""
    shapes = [(B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,), (B, H), (B, H)]
    lines = [f"input t{k} : Float32 [{', '.join(map(str, s))}]" for k, s in enumerate(shapes)]
    for k in indices:
        lines.append(f"t{10 + k} = GradLSTMCellInput(t6, t7, t0, t1, t2, t3, t4, t5, input_index={k}, "
                     f"hidden_size={H})")
    lines.append("output " + ", ".join(f"t{10 + k}" for k in indices))
    return "\n".join(lines) + "\n"


def bench_cell(B: int, I: int, H: int, repeats: int) -> list[tuple]:
    """The issue's measure: a graph with all six indices against a graph with one, run by
    the runtime (outputs come from its buffer pool, as in real use)."""
    import gradir
    rng = np.random.default_rng(2)
    f = np.float32
    shapes = [(B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,), (B, H), (B, H)]
    inputs = {f"t{k}": rng.standard_normal(s, dtype=f) for k, s in enumerate(shapes)}
    # weights and bias as PyTorch initializes them (U(±1/sqrt(H))): unscaled N(0, 1) weights
    # saturate every gate, and the gate derivatives' products then underflow to denormals,
    # which made the weight-gradient GEMMs 1.5x slower (an artifact of the data)
    for k in (3, 4, 5):
        inputs[f"t{k}"] = rng.uniform(-1, 1, shapes[k]).astype(f) / np.float32(np.sqrt(H))
    singles_exe = [gradir.compile(_cell_graph(B, I, H, [k])) for k in range(6)]
    fused_exe = gradir.compile(_cell_graph(B, I, H, list(range(6))))
    assert len(fused_exe.plan.steps) == 1, "the six siblings were not fused"
    singles = [float("inf")] * 6
    fused = float("inf")
    for _ in range(3):  # alternate blocks of repeats, as for the layer, to spread the machine's noise
        singles = [min(t, best_time(lambda e=e: e.run(inputs), repeats)) for t, e in zip(singles, singles_exe)]
        fused = min(fused, best_time(lambda: fused_exe.run(inputs), repeats))
    print(f"\n## GradLSTMCellInput float32, B={B} I={I} H={H} (graphs through the runtime)")
    print("   single index   " + "  ".join(f"{k}:{t * 1e6:8.1f}us" for k, t in enumerate(singles)))
    mean = sum(singles) / 6
    print(f"   fused, all 6   {fused * 1e6:8.1f}us = {fused / mean:.2f}x the mean single index "
          f"({fused / min(singles):.2f}x the cheapest, {fused / max(singles):.2f}x the dearest); "
          f"six separate graphs cost {sum(singles) / fused:.2f}x the fused one")
    # GEMM FLOPs: the gate recomputation (X·W_ihᵀ, H·W_hhᵀ) in every graph, then per index one
    # GEMM: dX = da·W_ih, dH = da·W_hh, dW_ih = daᵀ·X, dW_hh = daᵀ·H (indices 2 and 5: none)
    unit = 2 * B * 4 * H
    gate, per_index = unit * (I + H), [unit * I, unit * H, 0, unit * I, unit * H, 0]
    flop_ratio = (gate + sum(per_index)) / (gate + sum(per_index) / 6)
    print(f"   GEMM FLOPs of all six / of the mean single index: {flop_ratio:.2f}x (where GEMMs dominate, "
          f"no implementation that computes all six results can do better)")
    return [(f"cell B={B},I={I},H={H}: fused-6 <= 1.5x one index (mean)", f"{fused / mean:.2f}x",
             fused <= 1.5 * mean),
            (f"cell B={B},I={I},H={H}: fused-6 / dearest single index", f"{fused / max(singles):.2f}x", None),
            (f"cell B={B},I={I},H={H}: GEMM FLOPs, all six / mean single index", f"{flop_ratio:.2f}x", None)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2, help="PyTorch intra-op threads (NumPy's BLAS uses its own)")
    args = ap.parse_args()
    print(f"numpy {np.__version__}, {os.cpu_count()} CPUs; min of {args.repeats} repeats; "
          f"compiled kernels: {'on' if jit.enabled() else 'off (' + (jit.why_unavailable() or 'GRADIR_JIT=0') + ')'}")
    print(f"OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT')}; BLAS threads sleep soon after a "
          f"call: {'yes' if parallel.blas_idle_threads_sleep() else 'no'} (gradir._blasenv)")
    goals = []
    for shape in SHAPES:
        goals += bench_layer(*shape, repeats=args.repeats, threads=args.threads)
    for shape in CELL_SHAPES:
        goals += bench_cell(*shape, repeats=args.repeats)
    print("\n## Goals (issue [lstm]); [info] lines are comparisons, not goals")
    for name, value, ok in goals:
        tag = "info" if ok is None else "met" if ok else "MISSED"
        print(f"   [{tag:>6s}] {name:<58s} {value}")


if __name__ == "__main__":
    main()
