"""GRU kernel benchmark: gradir's GRUGrad and GRUTraining (float32) against PyTorch's nn.GRU backward and
forward (when torch is importable) and a float32 GEMM roof, all measured in the same run.

    python benchmarks/bench_gru.py [--repeats N] [--threads N]

Gradients are checked against PyTorch's autograd (the gate-order mapping: ONNX z, r, h = PyTorch's r, z, n
reordered) before anything is timed.  Times are the minimum over repeats, in three alternating rounds (these
machines are noisy: compare ratios from one run).  gradir writes into preallocated outputs, as the runtime's
buffer plan does.  Goals (issue #32, "Speed"), at S,B,I,H = 100,64,256,256, 2 threads:

* GRUGrad (``linear_before_reset=1``, what PyTorch computes and exports) at most PyTorch's GRU backward time;
* and at least 85% of the float32 GEMM roof: the backward's GEMM work is 12·S·B·H·(I+H) FLOPs (``da·[W|R]``
  and ``daᵀ·[X|H]``), against a (S·B)×(I+H) by (I+H)×3H GEMM.  With ``linear_before_reset=1`` gradir also
  recomputes ``H_{t-1}·R_hᵀ`` (2·S·B·H² more: ORT's ``ZRH`` does not keep it), not counted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# gradir before NumPy (gradir._blasenv shortens OpenBLAS's idle-thread spin)
from gradir.backends.cpu.kernels import jit, parallel  # noqa: E402,I001
from gradir.backends.cpu.kernels.gru import gru_grad, gru_training

import numpy as np  # noqa: E402

from bench_lstm import best_time  # noqa: E402  (the same timing as the LSTM benchmark)

SHAPES = [(100, 64, 256, 256), (10, 4, 16, 32)]


def make_problem(S: int, B: int, I: int, H: int, lbr: int, seed: int = 0) -> dict:
    """Operands with PyTorch's initialization (U(±1/sqrt(H)): unscaled weights saturate the gates)."""
    rng = np.random.default_rng(seed)
    f = np.float32
    k = 1 / np.sqrt(H)
    ops = {"X": rng.standard_normal((S, B, I), dtype=f),
           "W": rng.uniform(-k, k, (1, 3 * H, I)).astype(f), "R": rng.uniform(-k, k, (1, 3 * H, H)).astype(f),
           "B": rng.uniform(-k, k, (1, 6 * H)).astype(f), "lbr": lbr}
    HAll, _, ZRH = gru_training(ops["X"], ops["W"], ops["R"], ops["B"], hidden_size=H, linear_before_reset=lbr)
    ops.update(HAll=HAll, ZRH=ZRH, dHAll=rng.standard_normal(HAll.shape, dtype=f))
    return ops


def gradir_backward(ops: dict, H: int) -> Callable[[], tuple]:
    S, B, I = ops["X"].shape
    f = np.float32
    outs = (np.empty((S, B, I), f), np.empty((1, 3 * H, I), f), np.empty((1, 3 * H, H), f),
            np.empty((1, 6 * H), f), np.empty((1, B, H), f))
    return lambda: gru_grad(ops["X"], ops["W"], ops["R"], ops["B"], None, None, ops["HAll"], ops["ZRH"],
                            ops["dHAll"], None, hidden_size=H, linear_before_reset=ops["lbr"], out=outs)


def gradir_forward(ops: dict, H: int) -> Callable[[], tuple]:
    S, B, _ = ops["X"].shape
    f = np.float32
    outs = (np.empty((S, 1, B, H), f), np.empty((1, B, H), f), np.empty((S, 1, B, 3 * H), f))
    return lambda: gru_training(ops["X"], ops["W"], ops["R"], ops["B"], hidden_size=H,
                                linear_before_reset=ops["lbr"], out=outs)


def _to_torch(a: np.ndarray, H: int) -> np.ndarray:
    """ONNX's z, r, h blocks (rows) in PyTorch's r, z, n order."""
    return np.concatenate([a[k * H:(k + 1) * H] for k in (1, 0, 2)])


def torch_problem(ops: dict, H: int, threads: int):  # type: ignore[no-untyped-def]
    """PyTorch nn.GRU with the same weights; (backward, forward without autograd, version), or Nones."""
    try:
        import torch
    except ImportError:
        return None, None, None
    torch.set_num_threads(threads)
    I = ops["X"].shape[2]
    gru = torch.nn.GRU(I, H)
    with torch.no_grad():
        gru.weight_ih_l0.copy_(torch.from_numpy(_to_torch(ops["W"][0], H)))
        gru.weight_hh_l0.copy_(torch.from_numpy(_to_torch(ops["R"][0], H)))
        gru.bias_ih_l0.copy_(torch.from_numpy(_to_torch(ops["B"][0, :3 * H], H)))
        gru.bias_hh_l0.copy_(torch.from_numpy(_to_torch(ops["B"][0, 3 * H:], H)))
    x = torch.from_numpy(ops["X"]).clone().requires_grad_(True)
    y, _ = gru(x)
    dy = torch.from_numpy(ops["dHAll"][:, 0]).clone()
    params = [x, gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0]

    def backward():  # type: ignore[no-untyped-def]
        return torch.autograd.grad(y, params, dy, retain_graph=True)

    xf = torch.from_numpy(ops["X"])

    def forward():  # type: ignore[no-untyped-def]
        with torch.no_grad():
            return gru(xf)

    return backward, forward, torch.__version__


def check_against_torch(ours: tuple, theirs: tuple, H: int) -> float:
    """Largest difference of dX, dW, dR, dB between gradir and PyTorch (relative to each one's largest)."""
    dX, dW, dR, dB = ours[0], ours[1][0], ours[2][0], ours[3][0]
    pairs = [(dX, theirs[0].numpy()), (_to_torch(dW, H), theirs[1].numpy()), (_to_torch(dR, H), theirs[2].numpy()),
             (_to_torch(dB[:3 * H], H), theirs[3].numpy()), (_to_torch(dB[3 * H:], H), theirs[4].numpy())]
    return max(float(np.abs(a - b).max() / max(1e-30, np.abs(b).max())) for a, b in pairs)


def gemm_roof(S: int, B: int, I: int, H: int) -> tuple[Callable[[], object], float]:
    """A float32 (S·B)×(I+H) by (I+H)×3H GEMM (half the backward's GEMM work in one piece) and its FLOPs."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((S * B, I + H), dtype=np.float32)
    b = rng.standard_normal((I + H, 3 * H), dtype=np.float32)
    c = np.empty((S * B, 3 * H), np.float32)
    return (lambda: np.matmul(a, b, out=c)), 2.0 * S * B * (I + H) * 3 * H


def bench_layer(S: int, B: int, I: int, H: int, repeats: int, threads: int) -> list[tuple]:
    goals = []
    big = (S, B, I, H) == (100, 64, 256, 256)
    budget = 1.0 if S * B * H > 100000 else 0.3
    roof_run, roof_flops = gemm_roof(S, B, I, H)
    for lbr in (1, 0):
        ops = make_problem(S, B, I, H, lbr)
        ours, fwd = gradir_backward(ops, H), gradir_forward(ops, H)
        t_back, t_fwd, version = torch_problem(ops, H, threads) if lbr else (None, None, None)
        print(f"\n## GRUGrad float32, S={S} B={B} I={I} H={H}, linear_before_reset={lbr} (forward, dHAll only)")
        if t_back is not None:
            err = check_against_torch(tuple(a.copy() for a in ours()), t_back(), H)
            print(f"   max |gradir - PyTorch| / max |PyTorch| over dX, dW, dR, dB: {err:.1e}")
            if err > 1e-4:
                raise SystemExit("gradients disagree with PyTorch's: not timing")
        t_ours = t_fw = t_roof = t_numpy = t_torch = t_tf = float("inf")
        for _ in range(3):  # alternating rounds spread the machine's noise
            t_roof = min(t_roof, best_time(roof_run, repeats, budget / 2))
            t_ours = min(t_ours, best_time(ours, repeats, budget))
            t_fw = min(t_fw, best_time(fwd, repeats, budget))
            if t_back is not None:
                t_torch = min(t_torch, best_time(t_back, repeats, budget))
                t_tf = min(t_tf, best_time(t_fwd, repeats, budget))
            if jit.enabled() and not big:
                with jit.disabled():
                    t_numpy = min(t_numpy, best_time(ours, repeats, budget))
        flops = 12 * S * B * H * (I + H)
        roof = roof_flops / t_roof / 1e9
        pct = 100 * flops / t_ours / 1e9 / roof
        print(f"   gradir GRUGrad     {t_ours * 1e3:9.3f} ms  {flops / t_ours / 1e9:7.1f} GFLOP/s "
              f"({pct:5.1f}% of the GEMM roof, {roof:.1f} GFLOP/s)")
        print(f"   gradir GRUTraining {t_fw * 1e3:9.3f} ms")
        if t_numpy < float("inf"):
            print(f"   gradir GRUGrad, NumPy cores (JIT off) {t_numpy * 1e3:9.3f} ms")
        tag = f"{S},{B},{I},{H} lbr={lbr}"
        if t_back is not None:
            print(f"   PyTorch {version} nn.GRU backward ({threads} threads) {t_torch * 1e3:9.3f} ms; "
                  f"forward without autograd {t_tf * 1e3:9.3f} ms")
            goals.append((f"{tag}: GRUGrad / PyTorch backward" + (" <= 1.0x" if big else ""),
                          f"{t_ours / t_torch:.2f}x", (t_ours <= t_torch) if big else None))
            goals.append((f"{tag}: GRUTraining / PyTorch forward (no autograd)", f"{t_fw / t_tf:.2f}x", None))
        goals.append((f"{tag}: GRUGrad % of GEMM roof" + (" >= 85%" if big and lbr else ""), f"{pct:.0f}%",
                      (pct >= 85) if big and lbr else None))
    return goals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="threads for gradir's kernels and PyTorch")
    ap.add_argument("--quick", action="store_true", help="the large shape only")
    args = ap.parse_args()
    parallel.set_threads(args.threads)
    print(f"numpy {np.__version__}, {os.cpu_count()} CPUs, {args.threads} threads; min of {args.repeats} repeats; "
          f"compiled kernels: {'on' if jit.enabled() else 'off (' + (jit.why_unavailable() or 'GRADIR_JIT=0') + ')'}; "
          f"load average {os.getloadavg()[0]:.1f}")
    goals = []
    for shape in SHAPES[:1] if args.quick else SHAPES:
        goals += bench_layer(*shape, repeats=args.repeats, threads=args.threads)
    print("\n## Goals (issue #32); [info] lines are comparisons, not goals")
    for name, value, ok in goals:
        tag = "info" if ok is None else "met" if ok else "MISSED"
        print(f"   [{tag:>6s}] {name:<58s} {value}")


if __name__ == "__main__":
    main()
