"""gradir's packed-panel GEMM kernel (gradir/backends/cpu/kernels/_jit_gemm.py) against NumPy's BLAS, on the
products the LSTM kernels give it, all measured in the same run.

    python benchmarks/bench_gemm.py [--repeats N]

One core: the step loops' per-step products (each half-batch loop runs on a core of its own,
with BLAS held to one thread), the forward's, and a small cell's.  Two cores: dX of
LSTMGrad at (100, 64, 256, 256), the rows split in two halves on two threads (as LSTMGrad
does), against the same halves by single-threaded BLAS and against BLAS's own two threads.
The kernel's time includes packing ``B`` where LSTMGrad packs it once per call (dX) and not
where a layer call packs it once for all its steps.  Then the weight gradients ``Xᵀ·dY`` of
bench_graphs.py's MLPs (a transposed left operand, K = 512 rows), which ``blocked.matmul``
gives to the kernel with both operands packed (gradir/backends/cpu/kernels/_jit_goto.py) where
``FAST_LARGE``: through ``blocked.matmul`` on two threads with it, and with it off (OpenBLAS's
single-threaded blocks), alternating.  No goal: information for bench_lstm.py and
bench_graphs.py.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gradir.backends.cpu.kernels import blocked, jit, parallel  # noqa: E402,I001  (gradir before NumPy: see bench_lstm)

import numpy as np  # noqa: E402
from bench_lstm import best_time  # noqa: E402

ONE_CORE = [("LSTMGrad step, half batch", 32, 1024, 256), ("LSTMGrad step, whole batch", 64, 1024, 256),
            ("LSTMTraining step, half batch", 32, 256, 1024), ("small cell", 4, 128, 32)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    jg = jit.load("gemm")
    if jg is None:
        sys.exit(f"compiled kernels unavailable: {jit.why_unavailable() or 'GRADIR_JIT=0'}")
    print(f"numpy {np.__version__}, {os.cpu_count()} CPUs; min of {args.repeats} repeats; "
          f"kernel used for large products on this CPU: {'yes' if jg.FAST_LARGE else 'no'} (_jit_gemm.FAST_LARGE)")
    rng = np.random.default_rng(0)
    f = np.float32
    print("\n## one core (BLAS held to one thread), float32")
    with parallel.blas_limit(1):
        for name, M, K, N in ONE_CORE:
            A = rng.standard_normal((M, K), dtype=f)
            B = rng.standard_normal((K, N), dtype=f)
            C = np.empty((M, N), f)
            Bp = jg.pack(B)
            flops = 2.0 * M * K * N
            t_ours = t_blas = float("inf")
            for _ in range(3):  # alternate, to spread the machine's noise
                t_ours = min(t_ours, best_time(lambda: jg.gemm(A, Bp, C), args.repeats))
                t_blas = min(t_blas, best_time(lambda: np.matmul(A, B, out=C), args.repeats))
            print(f"   {name:<30s} {M}x{K} by {K}x{N}: gradir {flops / t_ours / 1e9:6.1f} GFLOP/s, "
                  f"BLAS {flops / t_blas / 1e9:6.1f} GFLOP/s: BLAS takes {t_blas / t_ours:4.2f}x gradir's time")
    print("\n## two cores, float32: LSTMGrad's dX at (100, 64, 256, 256), 6400x1024 by 1024x256")
    M, K, N = 6400, 1024, 256
    A = rng.standard_normal((M, K), dtype=f)
    B = rng.standard_normal((K, N), dtype=f)
    C = np.empty((M, N), f)
    m = M // 2
    flops = 2.0 * M * K * N

    def ours() -> None:
        bp = jg.pack(B)
        parallel.run_two(lambda stop: jg.gemm(A[:m], bp, C[:m]), lambda stop: jg.gemm(A[m:], bp, C[m:]),
                         concurrent=True)

    def blas_halves() -> None:
        parallel.run_two(lambda stop: np.matmul(A[:m], B, out=C[:m]), lambda stop: np.matmul(A[m:], B, out=C[m:]),
                         concurrent=True)

    t_ours = t_halves = t_blas2 = float("inf")
    for _ in range(3):
        with parallel.blas_limit(1):
            t_ours = min(t_ours, best_time(ours, args.repeats))
            t_halves = min(t_halves, best_time(blas_halves, args.repeats))
        t_blas2 = min(t_blas2, best_time(lambda: np.matmul(A, B, out=C), args.repeats))
    for name, t in (("gradir kernel, two halves (packing included)", t_ours),
                    ("BLAS one thread each, two halves", t_halves), ("BLAS's own threads", t_blas2)):
        print(f"   {name:<46s} {t * 1e3:7.2f} ms  {flops / t / 1e9:6.1f} GFLOP/s  x{t / t_ours:4.2f} of gradir's time")
    weight_gradients(rng, args.repeats)


WEIGHT_GRADIENTS = [("MLP dW2 = Hᵀ·dY", 4096, 512, 1024), ("MLP dW1 = Xᵀ·dZ", 1024, 512, 4096),
                    ("loss MLP dW1", 1024, 512, 2048)]


def weight_gradients(rng: np.random.Generator, repeats: int) -> None:
    print("\n## two cores, float32: weight gradients (transposed A) through blocked.matmul")
    saved_threads, saved_k = parallel.get_threads(), blocked.GOTO_MAX_K
    parallel.set_threads(2)
    try:
        for name, M, K, N in WEIGHT_GRADIENTS:
            A = rng.standard_normal((K, M), dtype=np.float32).T
            B = rng.standard_normal((K, N), dtype=np.float32)
            C = np.empty((M, N), np.float32)
            flops = 2.0 * M * K * N
            blocked.GOTO_MAX_K = saved_k
            used = blocked._goto_kernel(A, B, C) is not None
            times = {saved_k: float("inf"), 0: float("inf")}
            with parallel.blas_limit(1):
                for _ in range(3):
                    for k in times:
                        blocked.GOTO_MAX_K = k
                        times[k] = min(times[k], best_time(lambda: blocked.matmul(A, B, out=C), repeats))
            t_ours, t_blas = times[saved_k], times[0]
            print(f"   {name:<18s} {M}x{K} by {K}x{N}: both packed{'' if used else ' (not used here)'} "
                  f"{flops / t_ours / 1e9:6.1f} GFLOP/s, OpenBLAS blocks {flops / t_blas / 1e9:6.1f} GFLOP/s: "
                  f"OpenBLAS takes {t_blas / t_ours:4.2f}x its time")
    finally:
        blocked.GOTO_MAX_K = saved_k
        parallel.set_threads(saved_threads)


if __name__ == "__main__":
    main()
