"""Benchmark the activation kernels (gradir/backends/cpu/kernels/activation/) against a memory floor
and PyTorch.

    python benchmarks/bench_activations.py [--size 4096] [--threads 2] [--repeats 9]

Every op runs on ``size x size`` float32 arrays through its registered kernel with a
preallocated (already page-faulted) ``out`` and ``set_threads(threads)``; the time is the
minimum over ``repeats`` runs.

**Bandwidth floor** (measured in the same run): the fastest of three trivial
2-input/1-output streaming kernels -- ``np.add``, ``np.maximum`` and ``np.bitwise_and``
(on the int32 views) of two ``size x size`` float32 arrays into a third -- each split into
``threads`` contiguous row ranges run concurrently on the same thread pool the kernels use.
It reads two arrays and writes one, exactly the traffic of a 2-operand gradient kernel,
and does no other work, so no such kernel can beat it.  One-operand forward ops are
reported against the same floor (they move 2/3 of its bytes).

**PyTorch** (when importable), ``torch.set_num_threads(threads)``, same arrays shared via
``torch.from_numpy``.  The goal (issue #4) is PyTorch's *autograd backward*: the
"autograd" column times ``torch.autograd.grad(y, x, dy, retain_graph=True)`` for ``y`` the
forward op applied to a leaf ``x`` (the forward is not timed).  Autograd allocates its
result (page faults here), so the stricter kernel-vs-kernel comparison is also shown:
"torch.out" is the ATen backward function's ``.out``/``grad_input`` overload writing into
a preallocated tensor, like gradir's kernels do.  Mapping: ReluGrad -> threshold_backward(dy, x,
0); SigmoidGrad/TanhGrad -> sigmoid_backward/tanh_backward(dy, y); LeakyReluGrad ->
leaky_relu_backward(dy, y, alpha, self_is_result=True); GeluGrad/FastGeluGrad ->
gelu_backward(dy, x, approximate='none'/'tanh'); QuickGeluGrad -> silu_backward(dy, alpha*x)
(QuickGelu(x) = silu(alpha x)/alpha; alpha*x is precomputed and not timed, which favours
torch); SoftmaxGrad(_13)/LogSoftmaxGrad(_13) with the last axis ->
_softmax_backward_data/_log_softmax_backward_data.  Forward ops use the corresponding
``out=`` functions (QuickGelu: silu of a precomputed alpha*x, again favouring torch).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# gradir before NumPy, as the gradir command does (gradir._blasenv: OpenBLAS's idle spin)
from gradir.backends.cpu.kernels import KERNELS, jit  # noqa: E402,I001
from gradir.backends.cpu.kernels import activation as act  # noqa: E402
from gradir.backends.cpu.kernels.parallel import parallel_rows, set_threads  # noqa: E402

import numpy as np  # noqa: E402

try:  # torch is optional
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

ALPHA_LEAKY = 0.01
ALPHA_QUICK = 1.702

# op -> goal as a multiple of the floor (gradient ops only, per the kernels issue)
GOALS = {
    "ReluGrad": 1.5, "SigmoidGrad": 1.5, "TanhGrad": 1.5, "LeakyReluGrad": 1.5,
    "QuickGeluGrad": 2.5, "GeluGrad": 2.5, "FastGeluGrad": 2.5,
    "SoftmaxGrad": 2.5, "SoftmaxGrad_13": 2.5, "LogSoftmaxGrad": 2.5, "LogSoftmaxGrad_13": 2.5,
}


def best_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm up (first-touch, pool start)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def floor_kernels(a: np.ndarray, b: np.ndarray, o: np.ndarray) -> dict[str, Callable[[], None]]:
    rows = a.shape[0]
    ai, bi, oi = a.view(np.int32), b.view(np.int32), o.view(np.int32)
    row_bytes = a.shape[1] * a.itemsize * 3

    def split(f: Callable[[slice], Any]) -> Callable[[], None]:
        return lambda: parallel_rows(rows, row_bytes, lambda r0, r1: f(slice(r0, r1)))

    return {
        "np.add": split(lambda s: np.add(a[s], b[s], out=o[s])),
        "np.maximum": split(lambda s: np.maximum(a[s], b[s], out=o[s])),
        "np.bitwise_and": split(lambda s: np.bitwise_and(ai[s], bi[s], out=oi[s])),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--only", default="", help="comma-separated op names (default: all)")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args(argv)

    n = args.size
    set_threads(args.threads)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((n, n), dtype=np.float32) * 2).astype(np.float32)
    dy = rng.standard_normal((n, n), dtype=np.float32)
    out = np.zeros_like(x)  # touched once: no page faults inside the timings
    ys = {
        "sigmoid": act.sigmoid(x), "tanh": act.tanh(x),
        "leaky": act.leaky_relu(x, alpha=ALPHA_LEAKY),
        "softmax": act.softmax(x, axis=-1), "log_softmax": act.log_softmax(x, axis=-1),
    }

    cases: list[tuple[str, tuple[np.ndarray, ...], dict[str, Any]]] = [
        ("ReluGrad", (dy, x), {}),
        ("SigmoidGrad", (dy, ys["sigmoid"]), {}),
        ("TanhGrad", (dy, ys["tanh"]), {}),
        ("LeakyReluGrad", (dy, ys["leaky"]), {"alpha": ALPHA_LEAKY}),
        ("QuickGeluGrad", (dy, x), {"alpha": ALPHA_QUICK}),
        ("GeluGrad", (dy, x), {}),
        ("FastGeluGrad", (dy, x), {}),
        ("SoftmaxGrad", (dy, ys["softmax"]), {"axis": 1}),
        ("SoftmaxGrad_13", (dy, ys["softmax"]), {"axis": -1}),
        ("LogSoftmaxGrad", (dy, ys["log_softmax"]), {"axis": 1}),
        ("LogSoftmaxGrad_13", (dy, ys["log_softmax"]), {"axis": -1}),
        ("Relu", (x,), {}),
        ("Sigmoid", (x,), {}),
        ("Tanh", (x,), {}),
        ("LeakyRelu", (x,), {"alpha": ALPHA_LEAKY}),
        ("QuickGelu", (x,), {"alpha": ALPHA_QUICK}),
        ("Gelu", (x,), {}),
        ("FastGelu", (x,), {}),
        ("Softmax", (x,), {"axis": -1}),
        ("LogSoftmax", (x,), {"axis": -1}),
    ]
    if args.only:
        keep = set(args.only.split(","))
        cases = [c for c in cases if c[0] in keep]

    torch_fns: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
    autograd_fns: dict[str, Callable[[], Any]] = {}
    if torch is not None and not args.no_torch:
        torch.set_num_threads(args.threads)
        tx, tdy, tout = torch.from_numpy(x), torch.from_numpy(dy), torch.from_numpy(out)
        ty = {k: torch.from_numpy(v) for k, v in ys.items()}
        tax = tx * ALPHA_QUICK
        A = torch.ops.aten
        f32 = torch.float32
        torch_fns = {
            "ReluGrad": (lambda: A.threshold_backward.grad_input(tdy, tx, 0.0, grad_input=tout),
                         lambda: A.threshold_backward(tdy, tx, 0.0)),
            "SigmoidGrad": (lambda: A.sigmoid_backward.grad_input(tdy, ty["sigmoid"],
                                                                  grad_input=tout),
                            lambda: A.sigmoid_backward(tdy, ty["sigmoid"])),
            "TanhGrad": (lambda: A.tanh_backward.grad_input(tdy, ty["tanh"], grad_input=tout),
                         lambda: A.tanh_backward(tdy, ty["tanh"])),
            "LeakyReluGrad": (
                lambda: A.leaky_relu_backward.grad_input(tdy, ty["leaky"], ALPHA_LEAKY, True,
                                                         grad_input=tout),
                lambda: A.leaky_relu_backward(tdy, ty["leaky"], ALPHA_LEAKY, True)),
            "QuickGeluGrad": (lambda: A.silu_backward.grad_input(tdy, tax, grad_input=tout),
                              lambda: A.silu_backward(tdy, tax)),
            "GeluGrad": (lambda: A.gelu_backward.grad_input(tdy, tx, approximate="none",
                                                            grad_input=tout),
                         lambda: A.gelu_backward(tdy, tx, approximate="none")),
            "FastGeluGrad": (lambda: A.gelu_backward.grad_input(tdy, tx, approximate="tanh",
                                                                grad_input=tout),
                             lambda: A.gelu_backward(tdy, tx, approximate="tanh")),
            "Relu": (lambda: torch.clamp_min(tx, 0.0, out=tout), lambda: torch.relu(tx)),
            "Sigmoid": (lambda: torch.sigmoid(tx, out=tout), lambda: torch.sigmoid(tx)),
            "Tanh": (lambda: torch.tanh(tx, out=tout), lambda: torch.tanh(tx)),
            "LeakyRelu": (lambda: A.leaky_relu.out(tx, ALPHA_LEAKY, out=tout),
                          lambda: A.leaky_relu(tx, ALPHA_LEAKY)),
            "QuickGelu": (lambda: A.silu.out(tax, out=tout), lambda: A.silu(tax)),
            "Gelu": (lambda: A.gelu.out(tx, approximate="none", out=tout),
                     lambda: A.gelu(tx, approximate="none")),
            "FastGelu": (lambda: A.gelu.out(tx, approximate="tanh", out=tout),
                         lambda: A.gelu(tx, approximate="tanh")),
            "Softmax": (lambda: A._softmax.out(tx, -1, False, out=tout),
                        lambda: A._softmax(tx, -1, False)),
            "LogSoftmax": (lambda: A._log_softmax.out(tx, -1, False, out=tout),
                           lambda: A._log_softmax(tx, -1, False)),
        }
        for name, key in (("SoftmaxGrad", "softmax"), ("SoftmaxGrad_13", "softmax")):
            torch_fns[name] = (
                lambda key=key: A._softmax_backward_data.out(tdy, ty[key], -1, f32,
                                                             grad_input=tout),
                lambda key=key: A._softmax_backward_data(tdy, ty[key], -1, f32))
        for name in ("LogSoftmaxGrad", "LogSoftmaxGrad_13"):
            torch_fns[name] = (
                lambda: A._log_softmax_backward_data.out(tdy, ty["log_softmax"], -1, f32, out=tout),
                lambda: A._log_softmax_backward_data(tdy, ty["log_softmax"], -1, f32))

        F = torch.nn.functional
        forwards = {
            "ReluGrad": (tx, torch.relu), "SigmoidGrad": (tx, torch.sigmoid), "TanhGrad": (tx, torch.tanh),
            "LeakyReluGrad": (tx, lambda t: F.leaky_relu(t, ALPHA_LEAKY)),
            "QuickGeluGrad": (tax, F.silu),  # silu(alpha x): the alpha scaling is left out (favours torch)
            "GeluGrad": (tx, F.gelu), "FastGeluGrad": (tx, lambda t: F.gelu(t, approximate="tanh")),
            "SoftmaxGrad": (tx, lambda t: torch.softmax(t, -1)),
            "SoftmaxGrad_13": (tx, lambda t: torch.softmax(t, -1)),
            "LogSoftmaxGrad": (tx, lambda t: torch.log_softmax(t, -1)),
            "LogSoftmaxGrad_13": (tx, lambda t: torch.log_softmax(t, -1)),
        }
        for name, (src, fwd) in forwards.items():
            leaf = src.detach().clone().requires_grad_(True)
            yt = fwd(leaf)
            autograd_fns[name] = (lambda yt=yt, leaf=leaf:
                                  torch.autograd.grad(yt, leaf, tdy, retain_graph=True))

    floors = floor_kernels(x, dy, out)
    floor_ms = {k: best_ms(f, args.repeats) for k, f in floors.items()}

    rows = []
    for name, operands, attrs in cases:
        fn = KERNELS[name].fn
        ms = best_ms(lambda fn=fn, operands=operands, attrs=attrs: fn(*operands, out=out, **attrs),
                     args.repeats)
        with jit.disabled():
            ms_np = best_ms(lambda fn=fn, operands=operands, attrs=attrs: fn(*operands, out=out, **attrs),
                            args.repeats)
        t_ms = t_ag = None
        if name in torch_fns:
            t_ms = best_ms(torch_fns[name][0], args.repeats)
        if name in autograd_fns:
            t_ag = best_ms(autograd_fns[name], args.repeats)
        rows.append((name, ms, ms_np, t_ms, t_ag))

    # measure the floor again at the end: the machine is noisy, keep the best
    for k, f in floors.items():
        floor_ms[k] = min(floor_ms[k], best_ms(f, args.repeats))
    floor = min(floor_ms.values())

    print(f"size {n}x{n} float32, threads {args.threads}, min of {args.repeats} runs")
    print("bandwidth floor (2 in / 1 out, chunked over the pool): "
          + ", ".join(f"{k} {v:.2f} ms" for k, v in floor_ms.items())
          + f"  -> floor = {floor:.2f} ms")
    if not torch_fns:
        print("torch: not importable (or --no-torch); torch columns empty")
    else:
        print(f"torch {torch.__version__}: 'autograd' = torch.autograd.grad through the forward op (the "
              "goal); 'torch.out' = ATen backward writing into a preallocated tensor (kernel vs kernel)")
    print(f"'ms' = gradir's kernel as it ships (compiled: {jit.enabled()}); 'numpy' = its NumPy path "
          "(GRADIR_JIT=0)")
    print("goal met = within the floor goal AND faster than PyTorch's autograd backward "
          "(forward ops have no goal)")
    head = (f"{'op':<18} {'ms':>7} {'x floor':>8} {'goal':>5} {'numpy':>7} {'autograd':>8} {'torch.out':>9} "
            f"{'vs autograd':>11} {'vs .out':>7}  goal met")
    print(head)
    print("-" * len(head))
    for name, ms, ms_np, t_ms, t_ag in rows:
        ratio = ms / floor
        goal = GOALS.get(name)
        vs = ms / t_ms if t_ms else None
        va = ms / t_ag if t_ag else None
        if goal is None:
            met = "-"
        else:
            checks = (("floor", ratio > goal), ("autograd", va is None or va >= 1.0))
            misses = [w for w, bad in checks if bad]
            met = "yes" if not misses else "no: " + ", ".join(misses)

        def cell(v: float | None, f: str) -> str:
            return format(v, f) if v is not None else "-"

        print(f"{name:<18} {ms:7.2f} {ratio:7.2f}x {(f'{goal:.1f}x' if goal else '-'):>5} {ms_np:7.2f} "
              f"{cell(t_ag, '8.2f'):>8} {cell(t_ms, '9.2f'):>9} "
              f"{(cell(va, '10.2f') + 'x') if va else '-':>11} "
              f"{(cell(vs, '6.2f') + 'x') if vs else '-':>7}"
              f"  {met}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
