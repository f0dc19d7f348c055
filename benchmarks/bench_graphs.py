"""Whole derived graphs (forward recomputation + backward) through gradir, against the same work
in PyTorch eager autograd, ``torch.compile`` (inductor) and ``jax.jit`` of ``jax.vjp``, all timed
in the same run (issue [fusion], "bench_graphs.py" and "Goals").

    python benchmarks/bench_graphs.py [--quick] [--graphs lstm,mlp,chain,loss,branches,gpt,gru,cnn,dwsep] [--threads N]
                                      [--repeats N] [--no-compile] [--no-jax] [--no-ort]

The graphs are in ``graph_cases.py``: gradir derives each backward graph (``gradir.grad``) from the
forward graph's text, with respect to the parameters (and the LSTM's input X, which a language
model's embedding needs); PyTorch and JAX differentiate the same function with respect to the same
values. The GPT block is timed in a second form in the same rounds: gradir runs ONNX Runtime's
training graph of the same function (``data/gpt_ort_<size>.onnx``, written by
``scripts/ort_fixtures/gpt_bench_graph.py``), imported with ``gradir.interop.onnx.import_onnx``
(``--no-ort`` leaves it out; so does a missing ``onnx``). Before any timing, every gradient of
gradir (both forms), torch.compile and JAX is checked against PyTorch eager, or JAX where PyTorch is
missing (max |a - b| / max |b| <= 1e-3; the benchmark stops with an error otherwise). Float32,
``--threads`` (default: every core) for gradir and PyTorch; JAX uses XLA's own pool (held to one
thread with ``--threads 1``). The first run compiles torch.compile's kernels (inductor caches them
on disk for later runs).

Times are medians of ``--repeats`` rounds after warm-up; in each round every implementation runs
once, in turn, so that the machine's slow phases spread over all of them (these machines are
shared and noisy: compare ratios from one run); the min-max and the ratio of the minimums are
printed beside them (on a busy machine the minimums are the better guess at a quiet one; the
goals are judged on the medians).  Each call returns every gradient: PyTorch's
forward and ``autograd.grad``; torch.compile's compiled forward and compiled backward (AOT
autograd); JAX's jitted ``vjp``; gradir's ``Executable.run`` of the derived graph.

Then, from gradir traces (``Executable.run(trace=...)``, one event per step), each heavy step's
time inside the graph against the same op compiled alone as a one-op graph on the values it
reads in the graph (medians of traced runs both ways; goal <= 1.15x).  Where torch, a C compiler
or JAX is missing, the benchmark says so and leaves out only those columns.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# gradir before NumPy, as the gradir command does (gradir._blasenv: OpenBLAS's idle spin)
import gradir  # noqa: E402,I001
from gradir import Graph, GraphInput  # noqa: E402
from gradir.backends.cpu.kernels import jit  # noqa: E402

import numpy as np  # noqa: E402

import graph_cases as gc  # noqa: E402

TOLERANCE = 1e-3   # max |a - b| / max |b|, per gradient, against PyTorch eager
STEP_GOAL = 1.15   # a step inside the graph / the same op alone
HEAVY_SHARE = 0.03  # steps taking at least this share of the traced run (and >= 0.2 ms) are "heavy"


class GradientMismatch(SystemExit):
    pass


def cpu_line() -> str:
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        info = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in out.splitlines())}
        model = info.get("Model name", "")
        if "CPU family" in info and "Model" in info:
            model += f", family {info['CPU family']} model {info['Model']}"
    except (OSError, subprocess.SubprocessError):
        pass
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        pass
    simd = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "no AVX2"
    return f"CPU: {model or 'unknown'} ({simd}), {os.cpu_count()} logical CPUs"


# ---------------------------------------------------------------------------------------------
# the implementations: each gives a zero-argument callable returning the gradients (as arrays)

def gradir_impl(case: gc.Case, threads: int) -> tuple[Callable[[], list], gradir.Executable, dict]:
    fwd = gradir.parse(case.text)
    bwd = gradir.grad(fwd, wrt=case.wrt)
    feeds = dict(case.inputs)
    for inp, ct in zip(bwd.inputs[len(fwd.inputs):], case.cotangents):
        feeds[inp.name] = ct
    exe = gradir.compile(bwd, threads=threads)
    return (lambda: list(exe.run(feeds).values())), exe, feeds


def imported_impl(case: gc.Case, threads: int) -> tuple[Callable[[], list], gradir.Executable, dict]:
    """gradir's run of the case's imported training graph (``Case.onnx_graph``: ONNX Runtime's), on the
    case's own values; returns the gradients in ``wrt``'s order (the loss output is left out)."""
    from gradir.interop.onnx import import_onnx
    path, reads = case.onnx_graph
    m = import_onnx(path)
    by_label = dict(m.inputs)  # its constants that became labelled inputs (the mask)
    by_label.update({label: case.inputs[name] for label, name in reads.items()})
    feeds = {i.name: by_label[i.label] for i in m.graph.inputs}  # by value name, as step_table feeds them
    want = [f"{label}_grad" for label in case.wrt_labels]
    missing = sorted(set(want) - set(m.graph.output_labels))
    if missing:
        raise SystemExit(f"{path}: no output {', '.join(missing)}")
    exe = gradir.compile(m.graph, threads=threads)
    return (lambda: [out[k] for out in [exe.run(feeds)] for k in want]), exe, feeds


def torch_impl(torch: Any, case: gc.Case, compiled: bool) -> Callable[[], list]:
    fn, args, leaves, from_torch = case.torch(torch, case.inputs)
    if compiled:
        fn = torch.compile(fn)
    cts = None

    def run() -> list:
        nonlocal cts
        outs = fn(*args)
        if cts is None:
            cts = [torch.from_numpy(c).reshape(o.shape) for c, o in zip(case.cotangents, outs)]
        return torch.autograd.grad(outs, leaves, cts)

    run.to_gradir = lambda grads: from_torch([g.detach().numpy() for g in grads])  # type: ignore[attr-defined]
    return run


def jax_impl(jax: Any, case: gc.Case) -> Callable[[], list]:
    f = case.jax(jax)
    n = len(case.wrt)

    @jax.jit
    def step(wrt: tuple, others: tuple, cts: tuple) -> Any:
        _, vjp = jax.vjp(lambda *w: f(*w, *others), *wrt)
        return vjp(cts)

    wrt = tuple(jax.device_put(case.inputs[k]) for k in case.wrt)
    others = tuple(jax.device_put(case.inputs[k]) for k in case.others)
    cts = tuple(jax.device_put(c) for c in case.cotangents)
    assert n == len(wrt)
    return lambda: jax.block_until_ready(step(wrt, others, cts))


# ---------------------------------------------------------------------------------------------

def check(case: gc.Case, name: str, grads: list, ref: list, ref_name: str) -> float:
    """The worst relative error of ``grads`` against ``ref``; stops the benchmark beyond TOLERANCE."""
    if len(grads) != len(ref):
        raise GradientMismatch(f"\nFAILED: {case.key}: {name} gave {len(grads)} gradients, {ref_name} {len(ref)}")
    worst = 0.0
    for label, a, b in zip(case.wrt_labels, grads, ref):
        err = gc.rel_error(np.asarray(a), np.asarray(b))
        if not err <= TOLERANCE:
            raise GradientMismatch(f"\nFAILED: {case.key}: {name}'s gradient of {label} differs from {ref_name}'s: "
                                   f"max |a - b| / max |b| = {err:.3g} > {TOLERANCE} "
                                   f"(shapes {np.shape(a)} and {np.shape(b)})")
        worst = max(worst, err)
    return worst


IDLE_GAP = 0.15  # seconds of idling before each timed call (see medians)


def medians(fns: dict[str, Callable[[], Any]], repeats: int, warmup: int = 2,
            spread: Optional[dict] = None) -> dict[str, float]:
    """Median seconds per call of each of ``fns``, run in turn round after round (``spread``, if a
    dict, receives each one's (min, max)).  Each timed call starts after ``IDLE_GAP`` seconds of
    idling, so that none starts while the thread pools of the one before it still spin (XLA's,
    OpenMP's and OpenBLAS's workers keep a core busy for a while after their last task; whichever
    implementation came next paid for it: measured 150 against 146 ms for gradir's LSTM LM right
    after JAX's against back to back)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            time.sleep(IDLE_GAP)
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    if spread is not None:
        spread.update({k: (min(v), max(v)) for k, v in times.items()})
    return {k: statistics.median(v) for k, v in times.items()}


def traced_run(exe: gradir.Executable, feeds: dict) -> tuple[float, dict[str, float]]:
    """One traced run: its wall time and each step's time, keyed by the step's results."""
    trace: list = []
    t0 = time.perf_counter()
    exe.run(feeds, trace=trace)
    wall = time.perf_counter() - t0
    return wall, {ev["args"]["results"]: ev["dur"] * 1e-6 for ev in trace}


def one_op_graph(st: Any, types: dict) -> Graph:
    """The step's op alone, on inputs named as its operands.  Each float result is read by a
    ``ReduceSum`` (not timed), so that it is an intermediate value, whose buffer the runtime pools
    across runs, as inside the graph: a graph output is a fresh array on every run, and writing
    one (page faults) would double a memory-bound op's time.  Built as a ``Graph`` from the plan's
    op objects, not as text: the plan's ``FusedElementwise`` ops print a line that the parser does
    not accept ("unknown op")."""
    names = list(dict.fromkeys(v for v in st.operands if v is not None))
    top = max(int(v[1:]) for v in names + list(st.results) if v[1:].isdigit()) + 1
    ops, outs = [st.op.copy(loc=None)], []
    for r in st.results:
        if types[r].dtype.is_float:
            reader = gradir.parse(f"input {r} : {types[r]}\nt{top} = ReduceSum({r})\noutput t{top}\n")
            ops.append(reader.ops[0].copy(loc=None))
            outs.append(f"t{top}")
            top += 1
        else:
            outs.append(r)
    return Graph([GraphInput(v, types[v]) for v in names], ops, outs)


def step_table(exe: gradir.Executable, feeds: dict, threads: int, runs: int) -> list[tuple[str, float, float]]:
    """Each heavy step: (description, median time inside the graph, median time alone).

    The graph's traced runs and the one-op graphs' traced runs alternate (round after round),
    so that both sides of a ratio see the same phases of a noisy machine."""
    first = [traced_run(exe, feeds)[1] for _ in range(2)]
    total = sum(first[-1].values())
    key = {", ".join(st.results): st for st in exe.plan.steps}
    heavy = sorted((key[k] for k, t in first[-1].items() if k in key and t >= max(HEAVY_SHARE * total, 2e-4)),
                   key=lambda st: st.index)
    if not heavy:
        return []
    types = exe.plan.types
    inputs = {i.name for i in exe.graph.inputs}
    # the values the heavy steps read, from the graph's own run (its optimized ops, made outputs)
    wanted = sorted({v for st in heavy for v in st.operands if v is not None and v not in inputs},
                    key=lambda v: int(v[1:]) if v[1:].isdigit() else 0)
    values = dict(feeds)
    if wanted:
        g = Graph([GraphInput(i.name, i.type) for i in exe.graph.inputs],
                  [st.op.copy(loc=None) for st in exe.plan.steps], wanted)
        values.update(gradir.compile(g, threads=threads).run(feeds))
    alone = []
    for st in heavy:
        names = list(dict.fromkeys(v for v in st.operands if v is not None))
        alone.append((gradir.compile(one_op_graph(st, types), threads=threads), {v: values[v] for v in names}))
        traced_run(*alone[-1])  # warm-up
    walls: list[float] = []
    inside: dict[str, list[float]] = {}
    by_itself: list[list[float]] = [[] for _ in heavy]
    for _ in range(runs):
        wall, steps = traced_run(exe, feeds)
        walls.append(wall)
        for k, t in steps.items():
            inside.setdefault(k, []).append(t)
        for times, st, (e, feed) in zip(by_itself, heavy, alone):
            times.append(traced_run(e, feed)[1][", ".join(st.results)])
    med = {k: statistics.median(v) for k, v in inside.items()}
    print(f"   traced runs: {statistics.median(walls) * 1e3:.2f} ms wall, the {len(med)} steps' times add up to "
          f"{sum(med.values()) * 1e3:.2f} ms")
    return [(f"{st.op.op_name} -> {', '.join(st.results)}", med[", ".join(st.results)], statistics.median(t))
            for st, t in zip(heavy, by_itself)]


def run_case(case: gc.Case, args: argparse.Namespace, torch: Any, jax: Any, have_cc: bool) -> list[tuple]:
    print(f"\n## {case.title}")
    print(f"   gradients w.r.t. {', '.join(case.wrt_labels)}; Float32, {args.threads} threads")
    for note in case.notes:
        print(f"   note: {note}")
    ours, exe, feeds = gradir_impl(case, args.threads)
    grads = [a.copy() for a in ours()]
    fns: dict[str, Callable[[], Any]] = {"gradir": ours}
    names = {"gradir": "gradir", "gradir_ort": "gradir (ORT's training graph)",
             "eager": f"PyTorch {torch.__version__ if torch else ''} eager",
             "compile": "torch.compile (inductor)", "jax": f"JAX {jax.__version__ if jax else ''} jit(vjp)"}
    ref, ref_name = None, ""
    if torch is None:
        print("   PyTorch: not installed; no PyTorch columns")
    else:
        eager = torch_impl(torch, case, compiled=False)
        ref, ref_name = eager.to_gradir(eager()), "PyTorch eager"
        fns["eager"] = eager
    if jax is not None:
        jrun = jax_impl(jax, case)
        t0 = time.perf_counter()
        jgrads = [np.asarray(a) for a in jrun()]
        took = time.perf_counter() - t0
        if ref is None:  # no PyTorch: JAX is the reference
            ref, ref_name = jgrads, "JAX"
        try:
            err = check(case, "JAX", jgrads, ref, ref_name)
            print(f"   JAX: first call (compiling) {took:.1f} s; vs {ref_name} {err:.1e}")
            fns["jax"] = jrun
        except GradientMismatch as e:  # JAX's result is wrong, not gradir's: its column is left out, said why
            print(f"   JAX: column left out, its gradients are not PyTorch's:{str(e).split(':', 2)[-1]}")
    if ref is None:
        print("   no reference (neither PyTorch nor JAX): gradir's gradients are NOT checked")
    else:
        print(f"   gradir vs {ref_name}: worst max|a-b|/max|b| = {check(case, 'gradir', grads, ref, ref_name):.1e} "
              f"(tolerance {TOLERANCE})")
    if case.onnx_graph is not None and not args.no_ort and importlib.util.find_spec("onnx") is not None:
        theirs, ort_exe, ort_feeds = imported_impl(case, args.threads)
        ogr = [a.copy() for a in theirs()]
        ref_o, ref_o_name = (ref, ref_name) if ref is not None else (grads, "gradir grad's graph")
        print(f"   gradir on ORT's training graph ({os.path.basename(case.onnx_graph[0])}, "
              f"{len(ort_exe.plan.steps)} steps; gradir grad's: {len(exe.plan.steps)}) vs {ref_o_name}: worst "
              f"max|a-b|/max|b| = {check(case, 'gradir (ORT graph)', ogr, ref_o, ref_o_name):.1e}")
        fns["gradir_ort"] = theirs
    if torch is not None and have_cc:
        try:
            comp = torch_impl(torch, case, compiled=True)
            t0 = time.perf_counter()
            out = comp()
            took = time.perf_counter() - t0
            err = check(case, "torch.compile", comp.to_gradir(out), ref, ref_name)
            print(f"   torch.compile: first call (compiling) {took:.1f} s; vs eager {err:.1e}")
            fns["compile"] = comp
        except GradientMismatch:
            raise
        except Exception as e:  # noqa: BLE001 - report and leave the column out
            print(f"   torch.compile failed, column left out: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    if "compile" not in fns:
        print(f"   torch.compile: {'not available (PyTorch missing)' if torch is None else 'left out'}")
    if jax is None:
        print(f"   JAX: {'left out' if args.no_jax else 'not installed'}; no JAX column")
    fns = {k: fns[k] for k in ("gradir", "gradir_ort", "eager", "compile", "jax") if k in fns}
    spread: dict = {}
    t = medians(fns, args.repeats, spread=spread)
    fastest = min(t, key=t.get)
    print(f"   {'':<34s} {'median':>9s}    {'min-max':>17s}")
    for k, v in t.items():
        lo, hi = spread[k]
        ratio = "" if k == "gradir" else (f"   gradir / this = {t['gradir'] / v:5.2f}x "
                                          f"(of the mins {spread['gradir'][0] / lo:5.2f}x)")
        print(f"   {names[k]:<34s} {v * 1e3:9.2f} ms ({lo * 1e3:7.1f}-{hi * 1e3:7.1f}){ratio}")
    others = [k for k in t if not k.startswith("gradir")]
    if others:
        best = min(others, key=t.get)
        also = "".join(f"; {names[k]} / fastest = {t[k] / t[best]:.2f}x" for k in t if k.startswith("gradir_"))
        print(f"   fastest of the others: {names[best]}; gradir / fastest = {t['gradir'] / t[best]:.2f}x{also}"
              f" (fastest overall: {names[fastest]})")
    goals = case_goals(case, t, {k: lo for k, (lo, _) in spread.items()}, names)
    rows = step_table(exe, feeds, args.threads, max(3, args.repeats // 2 + 1))
    if "gradir_ort" in fns:
        print("   gradir grad's graph, then ORT's:")
        ort_rows = step_table(ort_exe, ort_feeds, args.threads, max(3, args.repeats // 2 + 1))
        rows += [(f"{what} [ORT]", a, b) for what, a, b in ort_rows]
    if rows:
        print(f"   heavy steps (>= {HEAVY_SHARE:.0%} of the traced run): inside the graph vs the same op alone "
              f"(one-op graph on the same values), medians of traced runs")
        for what, inside, alone in rows:
            print(f"      {what:<44s} {inside * 1e3:9.2f} ms in graph {alone * 1e3:9.2f} ms alone  "
                  f"{inside / alone:5.2f}x")
        worst = max(rows, key=lambda r: r[1] / r[2])
        goals.append((f"{case.key}: every heavy step <= {STEP_GOAL}x its stand-alone time",
                      f"worst {worst[1] / worst[2]:.2f}x ({worst[0].split(' ->')[0]})",
                      worst[1] / worst[2] <= STEP_GOAL))
    return goals


def case_goals(case: gc.Case, t: dict, lows: dict, names: dict) -> list[tuple]:
    """The issue's goals for ``case``, judged on the medians ``t``; the ratio of the minimums
    (``lows``) is shown beside each: on a shared machine it is the better guess at a quiet one."""
    g = t["gradir"]

    def ratio(key: str, ours: str = "gradir") -> str:
        return f"{t[ours] / t[key]:.2f}x (of the mins: {lows[ours] / lows[key]:.2f}x)"

    def vs(key: str, limit: float, what: str) -> tuple:
        if key not in t:
            return (f"{case.key}: <= {limit}x {what}", "n/a (not measured)", None)
        return (f"{case.key}: <= {limit}x {what}", ratio(key), g / t[key] <= limit)

    info = [(f"{case.key}: gradir / {names[k]}", ratio(k), None) for k in t if not k.startswith("gradir")]
    if case.key in ("lstm", "gru"):
        return [vs("eager", 0.9, "PyTorch eager")] + info
    if case.key in ("mlp", "gpt", "cnn", "dwsep"):
        others = [k for k in t if not k.startswith("gradir")]
        if not others:
            return [(f"{case.key}: <= 1.0x the fastest", "n/a (not measured)", None)]
        best = min(others, key=t.get)
        ort = [(f"{case.key}, ORT's training graph: <= 1.0x the fastest ({names[best]})", ratio(best, "gradir_ort"),
                t["gradir_ort"] <= t[best])] if "gradir_ort" in t else []
        return [(f"{case.key}: <= 1.0x the fastest ({names[best]})", ratio(best), g <= t[best])] + ort + info
    if case.key == "chain":
        return [vs("compile", 1.0, "torch.compile"), vs("eager", 0.5, "PyTorch eager")] + info
    return info


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (a smoke run)")
    ap.add_argument("--graphs", default=",".join(gc.BUILDERS),
                    help=f"comma-separated, from {', '.join(gc.BUILDERS)} (default: all)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="gradir and PyTorch threads "
                    "(default: every core)")
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds (default 9, 3 with --quick)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--no-jax", action="store_true", help="leave JAX out")
    ap.add_argument("--no-ort", action="store_true", help="leave out gradir's run of ORT's training graph (gpt)")
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.graphs.split(",") if k.strip()]
    bad = [k for k in keys if k not in gc.BUILDERS]
    if bad or not keys:
        ap.error(f"--graphs: unknown {', '.join(bad) or '(none given)'}; choose from {', '.join(gc.BUILDERS)}")
    if args.threads < 1:
        ap.error("--threads must be at least 1")
    if args.repeats is None:
        args.repeats = 3 if args.quick else 9
    scale = "quick" if args.quick else "full"

    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    jax = None
    if not args.no_jax:
        if args.threads == 1:  # XLA reads its flags once, when JAX first makes a CPU client
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                       " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
        try:
            import jax
            jax.config.update("jax_platforms", "cpu")
        except ImportError:
            jax = None
    cc = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++") or shutil.which("clang++")
    have_cc = torch is not None and cc is not None and not args.no_compile
    if torch is not None and cc is None:
        print("torch.compile: no C++ compiler found (inductor needs one); column left out")

    print(cpu_line())
    print(f"numpy {np.__version__}, gradir {gradir.__version__} (compiled kernels "
          f"{'on' if jit.enabled() else 'off'}), PyTorch {torch.__version__ if torch else 'missing'}, "
          f"JAX {jax.__version__ if jax else 'missing' if not args.no_jax else 'left out'}, "
          f"C++ compiler for inductor: {cc or 'none'}{'' if have_cc or cc is None else ' (left out)'}")
    print(f"load average before: {', '.join(f'{x:.1f}' for x in os.getloadavg())} (other work on this machine "
          f"skews the times; compare ratios)")
    print(f"threads {args.threads}; medians of {args.repeats} alternating rounds after 2 warm-up calls, "
          f"each call after {IDLE_GAP} s idle; "
          f"{'--quick sizes' if args.quick else 'full sizes'}")
    goals = []
    for key in keys:
        goals += run_case(gc.build(key, scale), args, torch, jax, have_cc)
    print("\n## Goals (issue [fusion]); [info] lines are comparisons, not goals")
    for name, value, ok in goals:
        tag = ("n/a" if value.startswith("n/a") else "info") if ok is None else "PASS" if ok else "MISS"
        print(f"   [{tag:>4s}] {name:<60s} {value}")
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.quick:
        print("   (--quick: the goals are stated for the full sizes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
