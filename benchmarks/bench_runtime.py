"""Runtime benchmarks, each a ratio against a baseline measured in the same run.

1. dispatch overhead: a 10,000-op chain of tiny element-wise ops through
   gradir vs calling the same NumPy functions in a plain Python loop (goal <= 1.5x);
2. parallelism: two independent element-wise-heavy branches, 2 threads vs 1
   (goal >= 1.6x speed-up);
3. compile time for a 100,000-op graph: parse, verify, passes, plan (goal < 10 s).

    python benchmarks/bench_runtime.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

# gradir before NumPy, as the gradir command does (gradir._blasenv: OpenBLAS's idle spin)
import gradir  # noqa: E402,I001

import numpy as np  # noqa: E402
from gradir.text.syntax import parse  # noqa: E402


def paired(a, b, repeat: int = 9) -> tuple[float, float]:
    """Alternate a and b; return (median a, median b). On a noisy machine the
    alternation keeps slow phases from landing on one side only."""
    import statistics
    ta, tb = [], []
    for _ in range(repeat):
        for fn, ts in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def dispatch(n_ops: int) -> None:
    ops = [("Neg", np.negative), ("Exp", np.exp), ("Neg", np.negative), ("Tanh", np.tanh)]
    lines = ["input t0 : Float32 [16]"]
    for k in range(n_ops):
        lines.append(f"t{k + 1} = {ops[k % 4][0]}(t{k})")
    lines.append(f"output t{n_ops}")
    exe = gradir.compile("\n".join(lines) + "\n", threads=2)
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    fns = [f for _, f in ops]

    def plain():
        y = x
        for k in range(n_ops):
            y = fns[k % 4](y)
        return y

    ref = plain()
    out = exe.run({"t0": x})[f"t{n_ops}"]
    assert np.array_equal(ref, out)
    t_plain = best(plain)
    t_gradir = best(lambda: exe.run({"t0": x}))
    ratio = t_gradir / t_plain
    print(f"dispatch: {n_ops} tiny ops (Float32 [16])   plain NumPy loop {t_plain * 1e3:7.2f} ms   "
          f"gradir {t_gradir * 1e3:7.2f} ms   ratio {ratio:.2f}x   "
          f"(goal <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")
    print(f"          per op: plain {t_plain / n_ops * 1e6:.2f} us, gradir {t_gradir / n_ops * 1e6:.2f} us")


def _branches(ops: list[str], rows: int) -> str:
    text = [f"input t0 : Float32 [{rows}, 1024]", f"input t1 : Float32 [{rows}, 1024]"]
    n, heads = 2, ["t0", "t1"]
    for op in ops:
        for b in range(2):
            text.append(f"t{n} = {op}({heads[b]})")
            heads[b] = f"t{n}"
            n += 1
    text.append(f"t{n} = Add({heads[0]}, {heads[1]})")
    text.append(f"output t{n}")
    return "\n".join(text) + "\n"


def _plain_threads_speedup(ops: list[str], inputs: dict) -> float:
    """The hardware's own speed-up: both branches' kernels called directly, in
    sequence vs on two plain threads (kernels kept on one thread each)."""
    from concurrent.futures import ThreadPoolExecutor
    from gradir.backends.cpu.kernels import KERNELS
    fns = [KERNELS[o].fn for o in ops]
    bufs = {k: np.empty_like(v) for k, v in inputs.items()}

    def branch(k: str) -> None:
        x = inputs[k]
        for f in fns:
            f(x, out=bufs[k])
            x = bufs[k]

    with ThreadPoolExecutor(2) as ex, np.errstate(all="ignore"):
        t_seq, t_par = paired(lambda: [branch(k) for k in inputs],
                              lambda: [f.result() for f in [ex.submit(branch, k) for k in inputs]])
    return t_seq / t_par


def parallel(rows: int) -> None:
    """Two independent branches of element-wise ops, ``threads=2`` vs ``threads=1``.

    The headline is the runtime as it ships (ops of both branches run side by side
    and large kernels may also split their rows); the info lines keep each kernel
    on one thread to show the op-level part alone, next to the same kernels on two
    plain Python threads (what these 2 vCPUs give, measured in the same run)."""
    from gradir.backends.cpu.kernels import parallel as par
    rng = np.random.default_rng(0)
    inputs = {"t0": rng.standard_normal((rows, 1024)).astype(np.float32),
              "t1": rng.standard_normal((rows, 1024)).astype(np.float32)}
    cases = [("compute-heavy", ["Gelu", "Sigmoid", "Gelu", "Sigmoid"]),
             ("mixed", ["Gelu", "Sigmoid", "FastGelu", "QuickGelu"]),
             ("memory-bound", ["Tanh", "Exp", "Neg", "Relu"])]
    for k, (label, ops) in enumerate(cases):
        src = _branches(ops, rows)
        e1 = gradir.compile(src, threads=1)
        e2 = gradir.compile(src, threads=2)
        r1, r2 = e1.run(inputs), e2.run(inputs)
        assert all(np.array_equal(r1[n], r2[n]) for n in r1)
        t1, t2 = paired(lambda: e1.run(inputs), lambda: e2.run(inputs))
        saved = par.MIN_CHUNK_BYTES
        par.MIN_CHUNK_BYTES = 1 << 62  # each kernel on one thread
        try:
            t1_ops, t2_ops = paired(lambda: e1.run(inputs), lambda: e2.run(inputs))
            ceiling = _plain_threads_speedup(ops, inputs)
        finally:
            par.MIN_CHUNK_BYTES = saved
        s = t1 / t2
        verdict = f"(goal >= 1.6x: {'met' if s >= 1.6 else 'NOT met'})" if k == 0 else "(info)"
        print(f"parallel: 2 branches x {len(ops)} {label} ops ({', '.join(ops)}) on [{rows}, 1024] Float32")
        print(f"          threads=1 {t1 * 1e3:7.1f} ms   threads=2 {t2 * 1e3:7.1f} ms (medians of 9 alternating "
              f"runs)   speed-up {s:.2f}x   {verdict}")
        print(f"          op-level only (kernels unsplit): {t1_ops / t2_ops:.2f}x; the same kernels on 2 plain "
              f"threads without gradir: {ceiling:.2f}x")


def compile_time(n_ops: int) -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    from bench_check import generate
    text = generate(n_ops)
    parse("input t0 : Float32 [1]\noutput t0\n")
    t0 = time.perf_counter()
    g = parse(text, "big.gir")
    t1 = time.perf_counter()
    exe = gradir.compile(g)
    t2 = time.perf_counter()
    total = t2 - t0
    print(f"compile: {n_ops} ops   parse+verify {t1 - t0:6.2f} s   passes+plan {t2 - t1:6.2f} s   "
          f"total {total:6.2f} s   (goal < 10 s: {'met' if total < 10 else 'NOT met'})")
    print(f"          plan: {len(exe.plan.steps)} steps, peak {exe.plan.peak_bytes / 2**20:.1f} MiB, "
          f"naive {exe.plan.naive_bytes / 2**20:.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    args = ap.parse_args()
    dispatch(1000 if args.quick else 10_000)
    parallel(1024 if args.quick else 4096)
    compile_time(10_000 if args.quick else 100_000)


if __name__ == "__main__":
    main()
