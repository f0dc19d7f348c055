"""Element-wise fusion (the ``fuse-elementwise`` pass), each number against a baseline in the same run.

1. the element-wise chain of issue [fusion] (Mul, Tanh, Add, Sigmoid, Mul, Gelu, Sub, Exp on
   2048 x 2048 Float32), its derived graph (forward + backward), with and without the pass
   (medians of alternating runs), and the steps of one traced run of each;
2. compile time of a 10,000-op element-wise graph (a repeating pattern of four ops on
   128 x 128, as layers repeat), in a fresh process with an empty loop cache and again with
   the cache filled (goal: < 10 s).

    python benchmarks/bench_fusion.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import gradir  # noqa: E402,I001

import numpy as np  # noqa: E402

CHAIN = ["t2 = Mul(t0, t1)", "t3 = Tanh(t2)", "t4 = Add(t3, t0)", "t5 = Sigmoid(t4)", "t6 = Mul(t5, t1)",
         "t7 = Gelu(t6)", "t8 = Sub(t7, t0)", "t9 = Exp(t8)"]


def chain(n: int, repeat: int) -> None:
    text = f"input t0 : Float32 [{n}, {n}]\ninput t1 : Float32 [{n}, {n}]\n" + "\n".join(CHAIN) + "\noutput t9\n"
    grad = gradir.grad(gradir.parse(text))
    fused = gradir.compile(grad)
    plain = gradir.compile(grad, disable=["fuse-elementwise"])
    rng = np.random.default_rng(0)
    x = {i.name: rng.standard_normal(i.type.shape).astype(np.float32) for i in grad.inputs}
    a, b = fused.run(x), plain.run(x)
    worst = max(float(np.max(np.abs(a[k] - b[k]) / (np.abs(b[k]) + 1e-30))) for k in b)
    times: dict[str, list[float]] = {"fused": [], "unfused": []}
    for _ in range(repeat):
        for key, exe in (("fused", fused), ("unfused", plain)):
            t0 = time.perf_counter()
            exe.run(x)
            times[key].append(time.perf_counter() - t0)
    f, u = statistics.median(times["fused"]), statistics.median(times["unfused"])
    print(f"chain {n} x {n}, derived graph ({len(grad.ops)} ops): fused {f * 1e3:.1f} ms "
          f"({len(fused.plan.steps)} steps), unfused {u * 1e3:.1f} ms ({len(plain.plan.steps)} steps): "
          f"{f / u:.2f}x; max relative difference {worst:.1e}")
    for key, exe in (("fused", fused), ("unfused", plain)):
        trace: list = []
        exe.run(x, trace=trace)
        steps = ", ".join(f"{e['name']} {e['dur'] / 1e3:.1f}" for e in trace if e.get("ph") == "X")
        print(f"  one traced run, {key} (ms): {steps}")


_TEN_THOUSAND = """
import sys, time
t0 = time.perf_counter()
import gradir
from gradir.backends.cpu.kernels import fused_codegen
lines = ["input t0 : Float32 [128, 128]", "input t1 : Float32 [128]"]
for k in range(10_000):
    op = ["Add({}, t1)", "Neg({})", "Scale({}, factor=0.5)", "Mul({}, {})"][k % 4]
    prev = "t0" if k == 0 else f"t{k + 1}"
    lines.append(f"t{k + 2} = " + op.format(prev, prev))
lines.append("output t10001")
text = "\\n".join(lines) + "\\n"
t1 = time.perf_counter()
exe = gradir.compile(text)
t2 = time.perf_counter()
print(f"{t2 - t1:.2f} {t2 - t0:.2f} {fused_codegen.compile_count()} {len(exe.plan.steps)}")
"""


def ten_thousand() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GRADIR_CACHE_DIR=cache,
                   PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        for what in ("empty loop cache", "filled loop cache"):
            r = subprocess.run([sys.executable, "-c", _TEN_THOUSAND], env=env, capture_output=True, text=True,
                               check=True)
            compile_s, total_s, loops, steps = r.stdout.split()
            print(f"10,000-op graph, {what}: gradir.compile {compile_s} s ({loops} loops built or loaded, "
                  f"{steps} steps); the whole process {total_s} s (goal < 10 s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="512 x 512 and 3 repeats")
    args = ap.parse_args()
    chain(512 if args.quick else 2048, 3 if args.quick else 9)
    ten_thousand()


if __name__ == "__main__":
    main()
