"""Training in bounded memory (issue #33 [remat], "How it will be judged"): gradir's ``memory_budget`` against
the unbudgeted run, ``torch.utils.checkpoint`` and ``torch.compile``'s ``activation_memory_budget``, in one run.

    python benchmarks/bench_memory.py [--case stack,lstm,sweep] [--quick] [--threads N] [--repeats N]
                                      [--with-dx] [--no-torch] [--no-compile]

Cases (``memory_cases.py``):

* ``stack``: 6 pre-LayerNorm MLP blocks (4096 rows, C = 512, 4C hidden, Gelu, residual) and the loss
  ``mean(x*x)``; gradients of every parameter.  gradir runs the graph ``gradir.grad`` derives, without a
  budget and with ``memory_budget`` = 50% of its unbudgeted planned peak (goal: time <= 1.2x).  PyTorch runs
  the same function eager, with ``torch.utils.checkpoint.checkpoint(block, x, ..., use_reentrant=False)`` per
  block, and under ``torch.compile`` with ``torch._functorch.config.activation_memory_budget`` at each of
  ``--compile-budgets``.  For each torch configuration that measures less than gradir at 50%, gradir runs
  again at the budget that measures the same (``match_torch_memory``); each torch configuration is judged
  against the fastest gradir row that measured no more memory (goal: gradir faster at equal memory).
* ``lstm``: the judged LSTM language model (X [2048, 32, 512], hidden 512, 256 classes, mean cross-entropy
  (``SoftmaxCrossEntropyLoss``) of int targets; gradients of W, R, B, W_out, and X with ``--with-dx``),
  without a budget and with 25% of the unbudgeted planned peak: planned peaks, the measured peak against the
  budget (goal <= 1.1x), the time (goal <= 1.35x) and whether every output is bit-identical (``np.array_equal``).
* ``sweep``: the stack at a sweep of budgets: planned and measured peak and time per budget, and whether
  the peaks are monotonic in the budget.

Where a budget is infeasible (or ``gradir.compile`` has no ``memory_budget`` yet), the planner's error is
printed and that row is left out; the rest runs.

**How memory is measured.**  Every configuration runs in its own fresh process (``memory_procs.py``), with
glibc's ``MALLOC_MMAP_THRESHOLD_`` fixed at 128 KiB so that every large array is its own
mapping, returned to the system when freed (glibc's dynamic threshold would otherwise keep freed blocks of
a few MiB resident and hide later allocations): the process's resident set then follows its live memory.
The peak is the kernel's high-water mark of that process's resident set (``VmHWM`` in
``/proc/self/status``); it is not tied to any allocator (no ``torch.cuda`` statistics), so gradir and
PyTorch are measured the same way.

* ``stack`` and ``sweep``: the peak of one training step above the process's resident memory just before
  that step: ``VmHWM`` reset (``/proc/self/clear_refs``) before the step, minus ``VmRSS`` then.  The model's
  inputs and parameters are resident before the step, so they are not counted (gradir's *planned* peak
  counts them: the two columns differ by about their size).  Every implementation runs one step first
  (``torch.compile`` compiles on its first call; some of gradir's kernels are built on first use) whose
  results are dropped; gradir then compiles the graph again, a fresh ``Executable`` whose buffer pool
  starts empty, so that its measured step allocates every buffer it uses.
* ``lstm``: as the issue defines it, the process's whole peak (``VmHWM``, inputs included) above that of
  the same graph run at sequence 2 in the same kind of process (what the runtime itself takes; every gradir
  process loads the planner's solver, ``scipy.optimize``, so that the baseline includes it).

**How time is measured.**  The processes stay alive; the parent asks each in turn for one training step,
round after round (``--repeats`` rounds after a warm-up round, each step after ``IDLE_GAP`` s idle), and
each process times its own step (with glibc's thresholds set back to where its dynamic ones settle,
``memory_procs._malloc_for_timing``, so that the measuring setting does not slow PyTorch's allocations):
medians, with the min-max beside them (these machines are shared and noisy: compare ratios from one
run).  Before timing, every implementation's gradients are checked against PyTorch eager's (or gradir's
unbudgeted run's without PyTorch; max |a - b| / max |b| <= 1e-3), and each budgeted gradir run's against
the unbudgeted run's bit for bit.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import tempfile

from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from memory_procs import Session, compile_budgeted  # noqa: E402

TOLERANCE = 1e-3
MIB = 1 << 20
STACK_GOAL, LSTM_TIME_GOAL, LSTM_MEMORY_GOAL = 1.2, 1.35, 1.1
COMPILE_BUDGETS = "1.0,0.7,0.5,0.3,0.1"
SWEEP = "1.0,0.8,0.6,0.5,0.4,0.3,0.2"
QUICK_SWEEP = "1.0,0.5,0.3"


# ---------------------------------------------------------------------------------------------

def rel_error(a: Any, b: Any) -> float:
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.abs(a - b).max()) / max(float(np.abs(b).max()), 1e-30) if b.size else 0.0


def same_bits(a: list, b: list) -> bool:
    import numpy as np
    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))


def mib(n: Optional[float]) -> str:
    return "-" if n is None else f"{n / MIB:.1f}"


def planned(case: Any, threads: int, fraction: Optional[float], base: Optional[int] = None) -> tuple:
    """(backward graph, unbudgeted planned peak) or, with ``fraction``, (budget, planned peak or error)."""
    import gradir
    fwd = gradir.parse(case.text)
    bwd = gradir.grad(fwd, wrt=case.wrt)
    if fraction is None:
        return bwd, gradir.compile(bwd, threads=threads).plan.peak_bytes
    budget = int(base * fraction)
    exe = compile_budgeted(bwd, threads, budget)
    if isinstance(exe, str):
        return budget, exe
    return budget, exe.plan.peak_bytes


def least_feasible(case: Any, threads: int, error: str) -> tuple[Optional[int], Optional[int]]:
    """The least feasible budget the planner's ``error`` names, rounded up past its printed precision, and its
    planned peak; (None, None) where the error names none or that budget does not fit either."""
    from gradir.transforms.memory.budget import parse_budget
    m = re.search(r"least feasible budget is ([\d.]+) ?([KMGT]i?B|B)\b", error)
    if not m:
        return None, None
    digits = m.group(1).split(".")[1] if "." in m.group(1) else ""
    unit = parse_budget("1 " + m.group(2)) if m.group(2) != "B" else 1
    budget = parse_budget(f"{m.group(1)} {m.group(2)}") + int(unit * 0.5 * 10 ** -len(digits)) + 1
    got = planned(case, threads, 1.0, budget)[1]
    return (budget, got) if isinstance(got, int) else (None, None)


def budgeted_row(case: Any, threads: int, fraction: float, p0: int, fallback: str) -> tuple[int, Any, Optional[tuple]]:
    """(budget, its planned peak or the planner's error, and where that budget is infeasible and ``fallback``
    is not "none", what the case runs instead, for information: (budget, planned peak, label) of the least
    feasible budget the planner names ("least") or of the knee of its peak / time curve ("auto"))."""
    budget, p1 = planned(case, threads, fraction, p0)
    print(f"   gradir planned peak: unbudgeted {mib(p0)} MiB; budget {fraction:.0%} = {mib(budget)} MiB: "
          + (f"planned {mib(p1)} MiB" if isinstance(p1, int) else f"INFEASIBLE: {p1}"))
    if isinstance(p1, int) or fallback == "none":
        return budget, p1, None
    if fallback == "auto":
        import gradir
        exe = compile_budgeted(gradir.grad(gradir.parse(case.text), wrt=case.wrt), threads, "auto")
        if isinstance(exe, str) or exe.plan.memory is None:
            return budget, p1, None
        b2, p2, what = exe.plan.memory.budget, exe.plan.peak_bytes, "the knee of the planner's curve (auto)"
    else:
        b2, p2 = least_feasible(case, threads, p1)
        what = "the least feasible budget"
        if b2 is None:
            return budget, p1, None
    print(f"   so gradir runs at {what} instead, {mib(b2)} MiB = {b2 / p0:.1%} of the unbudgeted "
          f"peak: planned {mib(p2)} MiB (the goals at {fraction:.0%} are missed)")
    label = f"gradir, {'auto' if fallback == 'auto' else 'least feasible'} {b2 / p0:.1%}"
    return budget, p1, (b2, p2, label)


def report_lines(case: Any, threads: int, budget: int) -> list[str]:
    """What the planner says it did (``exe.plan.memory``), a few lines, where it is there."""
    import gradir
    bwd = gradir.grad(gradir.parse(case.text), wrt=case.wrt)
    exe = compile_budgeted(bwd, threads, budget)
    mem = None if isinstance(exe, str) else getattr(exe.plan, "memory", None)
    if mem is None:
        return []
    lines = mem.lines() if hasattr(mem, "lines") else str(mem).splitlines()
    return lines[:14] + ([f"... ({len(lines) - 14} more lines: gradir plan --memory-budget shows them)"]
                         if len(lines) > 14 else [])


def print_table(rows: dict[str, dict], base: str, planned_col: bool = True) -> None:
    print(f"   {'':<46s} {'planned':>9s} {'measured':>9s} {'median':>10s} {'min-max':>17s} {'time / ' + base:>14s}")
    b = rows.get(base, {}).get("median")
    for k, r in rows.items():
        t = r.get("median")
        ratio = f"{t / b:.2f}x" if t and b else "-"
        tm = f"{t * 1e3:7.1f} ms" if t else "-"
        mm = f"({r['lo'] * 1e3:6.1f}-{r['hi'] * 1e3:6.1f})" if t else ""
        print(f"   {k:<46s} {mib(r.get('planned_peak')) if planned_col else '':>9s} {mib(r.get('measured')):>9s} "
              f"{tm:>10s} {mm:>17s} {ratio:>14s}")
    print("   (MiB; planned: gradir's plan, inputs and outputs included; measured: see the docstring)")


def check_gradients(rows: dict[str, dict], ref: str, names: list[str]) -> bool:
    ok = True
    for k in names:
        if k == ref or k not in rows:
            continue
        errs = [rel_error(a, b) for a, b in zip(rows[k]["outputs"], rows[ref]["outputs"])]
        worst = max(errs, default=float("inf")) if len(rows[k]["outputs"]) == len(rows[ref]["outputs"]) \
            else float("inf")
        good = worst <= TOLERANCE
        ok &= good
        print(f"   {k} vs {ref}: worst max|a-b|/max|b| = {worst:.1e}{'' if good else '  FAILED (> 1e-3)'}")
        rows[k]["grads_ok"] = good
    return ok


# ---------------------------------------------------------------------------------------------
# the cases

def run_stack(args: argparse.Namespace, logdir: str, torch_ok: bool) -> tuple[dict, list]:
    import memory_cases as mc
    case = mc.build("stack", args.scale)
    print(f"\n## {case.title}\n   gradients of {len(case.wrt)} parameters; Float32, {args.threads} threads")
    _, p0 = planned(case, args.threads, None)
    budget, p1, instead = budgeted_row(case, args.threads, args.stack_budget, p0, args.fallback or "least")
    run_at = budget if isinstance(p1, int) else instead[0] if instead else None
    for ln in report_lines(case, args.threads, run_at) if run_at else []:
        print(f"      {ln}")
    s = Session(args, logdir)
    res: dict = {"budget": budget, "base_planned": p0, "planned": p1 if isinstance(p1, int) else None,
                 "least_feasible": instead}
    at = f"gradir, budget {args.stack_budget:.0%}" if isinstance(p1, int) else \
        instead[2] if instead else ""
    try:
        s.start("gradir", impl="gradir", case="stack", warm=True)
        if run_at:
            s.start(at, impl="gradir", case="stack", budget=run_at, warm=True)
        if torch_ok:
            s.start("PyTorch eager", impl="eager", case="stack")
            s.start("torch.utils.checkpoint per block", impl="checkpoint", case="stack")
            for b in ([] if args.no_compile else [float(x) for x in args.compile_budgets.split(",") if x.strip()]):
                s.start(f"torch.compile, activation_memory_budget {b:g}", impl="compile", case="stack",
                        compile_budget=b)
        for r in s.rows.values():
            r["measured"] = r["step_peak"]
        res["matched"] = match_torch_memory(s, case, args.threads, at)
        ref = "PyTorch eager" if "PyTorch eager" in s.rows else "gradir"
        grads_ok = check_gradients(s.rows, ref, list(s.rows))
        if at in s.rows and "gradir" in s.rows:
            res["bits_equal"] = same_bits(s.rows[at]["outputs"], s.rows["gradir"]["outputs"])
            print(f"   {at} vs gradir unbudgeted: every output bit-identical: {res['bits_equal']}")
        if not grads_ok:
            raise SystemExit("FAILED: gradients differ (see above)")
        s.time_all(args.repeats)
        print_table(s.rows, "gradir")
    finally:
        s.close()
    res["rows"] = {k: {x: v for x, v in r.items() if x != "outputs"} for k, r in s.rows.items()}
    return res, stack_goals(s.rows, at, res)


def match_torch_memory(s: Any, case: Any, threads: int, at: str) -> dict:
    """For each torch configuration that measured less than gradir at the judged budget, a gradir row at the
    budget whose planned peak is that measurement plus what gradir's plan counts beyond its own measure (the
    judged row's planned minus measured peak: inputs and weights resident before the step), so that the
    comparison is at equal measured memory.  Returns {torch row: gradir row, or the planner's error}."""
    g = s.rows.get(at)
    if g is None or not g.get("planned_peak"):
        return {}
    offset = g["planned_peak"] - g["measured"]
    out: dict = {}
    for k, r in list(s.rows.items()):
        if not k.startswith("torch") or r["measured"] >= g["measured"]:
            continue
        want = int(r["measured"] + offset)
        budget, got = planned(case, threads, 1.0, want)
        label = f"gradir at {k.replace('activation_memory_budget', 'budget')}'s memory"
        if isinstance(got, str):
            print(f"   {label}: budget {mib(budget)} MiB infeasible: {got}")
            out[k] = got
            continue
        if s.start(label, impl="gradir", case="stack", budget=budget, warm=True) is not None:
            s.rows[label]["measured"] = s.rows[label]["step_peak"]
            out[k] = label
    return out


def stack_goals(rows: dict, at: str, res: dict) -> list[tuple]:
    goals: list[tuple] = []
    g, b = rows.get(at), rows.get("gradir")
    want = f"{res['budget'] / res['base_planned']:.0%}"
    goals.append((f"stack: the {want} budget is feasible", "yes" if res["planned"] is not None else
                  "no (see the planner's error above)", res["planned"] is not None))
    if g is None or b is None or "median" not in g:
        return goals + [(f"stack: gradir at {want} <= {STACK_GOAL}x unbudgeted time", "n/a (no budgeted run)", None)]
    if res["planned"] is None:
        goals.append((f"stack: {at} (info)", f"time {g['median'] / b['median']:.2f}x unbudgeted", None))
    else:
        goals.append((f"stack: gradir at {want} <= {STACK_GOAL}x unbudgeted time",
                      f"{g['median'] / b['median']:.2f}x (of the mins {g['lo'] / b['lo']:.2f}x)",
                      g["median"] / b["median"] <= STACK_GOAL))
        goals.append(("stack: planned peak <= budget", f"{mib(res['planned'])} <= {mib(res['budget'])} MiB",
                      res["planned"] <= res["budget"]))
    goals.append(("stack: outputs bit-identical to the unbudgeted run", str(res.get("bits_equal")),
                  bool(res.get("bits_equal"))))
    # each torch configuration against the fastest gradir row that measured no more memory than it (the judged
    # budget's, or one run at that configuration's memory: ``match_torch_memory``), 2% of slack on the measure
    mine = {k: r for k, r in rows.items() if k.startswith("gradir") and k != "gradir" and "median" in r}
    for k, t in rows.items():
        if not k.startswith("torch") or "median" not in t:
            continue
        name = k.replace("activation_memory_budget", "budget")
        fit = {m: r for m, r in mine.items() if r["measured"] <= 1.02 * t["measured"]}
        if not fit:
            why = res.get("matched", {}).get(k)
            goals.append((f"stack: gradir faster than {name} at no more memory",
                          f"no gradir row at {mib(t['measured'])} MiB or less"
                          + (f" ({why.split(': ', 1)[-1][:90]})" if isinstance(why, str) and why not in rows else ""),
                          False))
            continue
        m = min(fit, key=lambda m: fit[m]["median"])
        goals.append((f"stack: gradir faster than {name} at no more memory",
                      f"time {fit[m]['median'] / t['median']:.2f}x, measured peak {mib(fit[m]['measured'])} vs "
                      f"{mib(t['measured'])} MiB ({m})", fit[m]["median"] < t["median"]))
    return goals


def run_lstm(args: argparse.Namespace, logdir: str) -> tuple[dict, list]:
    import memory_cases as mc
    case = mc.build("lstm", args.scale, args.with_dx)
    print(f"\n## {case.title}\n   Float32, {args.threads} threads")
    _, p0 = planned(case, args.threads, None)
    budget, p1, instead = budgeted_row(case, args.threads, args.lstm_budget, p0, args.fallback or "auto")
    run_at = budget if isinstance(p1, int) else instead[0] if instead else None
    for ln in report_lines(case, args.threads, run_at) if run_at else []:
        print(f"      {ln}")
    res: dict = {"budget": budget, "base_planned": p0, "planned": p1 if isinstance(p1, int) else None,
                 "least_feasible": instead}
    s = Session(args, logdir)
    at = f"gradir, budget {args.lstm_budget:.0%}" if isinstance(p1, int) else \
        instead[2] if instead else ""
    res["label"] = at
    try:
        own = s.start("gradir at sequence 2 (the runtime's own)", impl="gradir", case="lstm", seq=2,
                      with_dx=args.with_dx)
        s.start("gradir", impl="gradir", case="lstm", with_dx=args.with_dx)
        if run_at:
            s.start(at, impl="gradir", case="lstm", with_dx=args.with_dx, budget=run_at)
        for k, r in s.rows.items():
            r["measured"] = r["hwm_life"] - own["hwm_life"] if own and not k.endswith("own)") else None
        if at in s.rows and "gradir" in s.rows:
            res["bits_equal"] = same_bits(s.rows[at]["outputs"], s.rows["gradir"]["outputs"])
            print(f"   {at} vs gradir unbudgeted: every output bit-identical (np.array_equal): {res['bits_equal']}")
        own_row = s.rows.pop("gradir at sequence 2 (the runtime's own)", None)
        if own_row is not None:
            s.children.pop("gradir at sequence 2 (the runtime's own)").close()
            print(f"   the runtime's own peak (the same graph at sequence 2): {mib(own_row['hwm_life'])} MiB resident")
        s.time_all(args.repeats)
        print_table(s.rows, "gradir")
    finally:
        s.close()
    for k in ("gradir", at):
        if k in s.rows:
            res[k] = {x: v for x, v in s.rows[k].items() if x != "outputs"}
    g, b = s.rows.get(at), s.rows.get("gradir")
    if b and b.get("measured") is not None:
        print(f"   unbudgeted: measured {mib(b['measured'])} MiB against planned {mib(p0)} MiB "
              f"({b['measured'] / p0:.2f}x)")
    want = f"{args.lstm_budget:.0%}"
    goals = [(f"lstm: the {want} budget is feasible",
              "yes" if isinstance(p1, int) else "no: " + p1.split("error: ")[-1], isinstance(p1, int))]
    if g is None or "median" not in g or b is None:
        return res, goals + [(f"lstm: gradir at {want} runs", "n/a: no budgeted run", None)]
    ran = run_at if run_at else budget
    info = None if not isinstance(p1, int) else True  # at the least feasible budget: information, not the goal
    return res, goals + [
        (f"lstm: {at}: planned peak <= budget", f"{mib(g['planned_peak'])} <= {mib(ran)} MiB",
         g["planned_peak"] <= ran if info else None),
        (f"lstm: {at}: measured peak <= {LSTM_MEMORY_GOAL}x the budget", f"{mib(g['measured'])} MiB = "
         f"{g['measured'] / ran:.2f}x" if g["measured"] is not None else "n/a",
         (g["measured"] is not None and g["measured"] <= LSTM_MEMORY_GOAL * ran) if info else None),
        (f"lstm: {at}: time <= {LSTM_TIME_GOAL}x unbudgeted", f"{g['median'] / b['median']:.2f}x (of the mins "
         f"{g['lo'] / b['lo']:.2f}x)", g["median"] / b["median"] <= LSTM_TIME_GOAL if info else None),
        (f"lstm: {at}: outputs bit-identical", str(res.get("bits_equal")), bool(res.get("bits_equal")))]


def run_sweep(args: argparse.Namespace, logdir: str) -> tuple[dict, list]:
    import memory_cases as mc
    case = mc.build("stack", args.scale)
    print(f"\n## Sweep of budgets on the stack ({case.title})")
    _, p0 = planned(case, args.threads, None)
    s = Session(args, logdir)
    rows: list[dict] = []
    try:
        fractions = [float(x) for x in args.sweep.split(",")]
        extra: Optional[float] = None  # the least feasible budget, added where the sweep crosses it
        for f in fractions + [None]:  # type: ignore[list-item]
            if f is None:
                if extra is None:
                    break
                f = extra
            budget, p = planned(case, args.threads, f, p0)
            if isinstance(p, str) and extra is None and f in fractions:
                b2, _ = least_feasible(case, args.threads, p)
                extra = (b2 + 2) / p0 if b2 and all(abs(b2 / p0 - x) > 1e-3 for x in fractions) else None
            row = {"fraction": f, "budget": budget, "planned": p if isinstance(p, int) else None,
                   "error": p if isinstance(p, str) else None}
            rows.append(row)
            if isinstance(p, int):
                row["name"] = f"budget {f:.1%}"
                r = s.start(row["name"], impl="gradir", case="stack", budget=budget, warm=True)
                if r is not None:
                    row["measured"] = r["step_peak"]
        s.time_all(max(1, args.repeats // 2))
        rows.sort(key=lambda r: -r["budget"])
        first = next((r for r in rows if r.get("name") in s.rows), None)
        print(f"   {'budget':>16s} {'planned':>9s} {'measured':>9s} {'median':>10s} {'time':>7s}  bits")
        for r in rows:
            got = s.rows.get(r.get("name", ""), {})
            if r["error"]:
                why = r["error"].split("error: ")[-1][:150]
                print(f"   {r['fraction']:>6.1%} {mib(r['budget']):>9s} infeasible: {why}")
                continue
            r["median"] = got.get("median")
            r["bits_equal"] = first is not None and "outputs" in got and \
                same_bits(got["outputs"], s.rows[first["name"]]["outputs"])
            ratio = f"{r['median'] / first['median']:.2f}x" if r["median"] and first.get("median") else "-"
            print(f"   {r['fraction']:>6.1%} {mib(r['budget']):>9s} {mib(r['planned']):>9s} "
                  f"{mib(r.get('measured')):>9s} {r['median'] * 1e3 if r['median'] else 0:>7.1f} ms {ratio:>7s}  "
                  f"{'same' if r['bits_equal'] else 'DIFFER'}")
    finally:
        s.close()
    ok = [r for r in rows if r["planned"] is not None]
    mono_p = all(a["planned"] >= b["planned"] for a, b in zip(ok, ok[1:]))
    meas = [r for r in ok if r.get("measured") is not None]
    slack = 2 * MIB
    mono_m = all(a["measured"] + slack >= b["measured"] for a, b in zip(meas, meas[1:]))
    print(f"   (MiB; budgets as fractions of the unbudgeted planned peak {mib(p0)} MiB, largest first; measured: "
          "one step's peak above the resident memory before it)")
    if not ok:
        return {"rows": rows, "base_planned": p0}, [("sweep: peaks monotonic in the budget", "n/a: none ran", None)]
    return {"rows": rows, "base_planned": p0}, [
        ("sweep: planned peak monotonic in the budget", str(mono_p), mono_p if len(ok) > 1 else None),
        ("sweep: measured peak monotonic in the budget (2 MiB slack)", str(mono_m), mono_m if len(meas) > 1 else None),
        ("sweep: every planned peak <= its budget", str(all(r["planned"] <= r["budget"] for r in ok)),
         all(r["planned"] <= r["budget"] for r in ok)),
        ("sweep: every output bit-identical", str(all(r.get("bits_equal") for r in ok)),
         all(r.get("bits_equal") for r in ok))]


# ---------------------------------------------------------------------------------------------

def run(argv: Optional[list[str]] = None) -> dict:
    """Parse ``argv``, run the cases, print; returns each case's results and the goals (for the test)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="stack,lstm,sweep", help="comma-separated, from stack, lstm, sweep")
    ap.add_argument("--quick", action="store_true", help="small sizes, fewer repeats (a smoke run, < 60 s)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds (default 7, 2 with --quick)")
    ap.add_argument("--with-dx", action="store_true", help="lstm: the gradient of X too")
    ap.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--stack-budget", type=float, default=0.5, help="fraction of the unbudgeted planned peak")
    ap.add_argument("--lstm-budget", type=float, default=0.25, help="fraction of the unbudgeted planned peak")
    ap.add_argument("--compile-budgets", default=None, help=f"activation_memory_budget values (default "
                    f"{COMPILE_BUDGETS}; none with --quick: torch.compile alone takes a minute there)")
    ap.add_argument("--fallback", choices=("least", "auto", "none"), default=None,
                    help="where a case's budget is infeasible, run instead (for information) at the least feasible "
                         "budget the planner names, or at the knee of its curve (auto); default: least for the "
                         "stack, auto for the LSTM (its least feasible point recomputes every step many times)")
    ap.add_argument("--sweep", default=None, help=f"budgets, fractions of the unbudgeted peak (default {SWEEP}; "
                    f"{QUICK_SWEEP} with --quick)")
    args = ap.parse_args(argv)
    cases = [c.strip() for c in args.case.split(",") if c.strip()]
    bad = [c for c in cases if c not in ("stack", "lstm", "sweep")]
    if bad or not cases:
        ap.error(f"--case: unknown {', '.join(bad) or '(none given)'}; choose from stack, lstm, sweep")
    if args.threads < 1:
        ap.error("--threads must be at least 1")
    args.scale = "quick" if args.quick else "full"
    args.repeats = args.repeats or (2 if args.quick else 7)
    args.sweep = args.sweep or (QUICK_SWEEP if args.quick else SWEEP)
    args.compile_budgets = args.compile_budgets or ("" if args.quick else COMPILE_BUDGETS)

    import gradir  # noqa: F401  (before NumPy: gradir._blasenv)
    import numpy as np
    have_torch = importlib.util.find_spec("torch") is not None
    torch_ok = have_torch and not args.no_torch
    print(cpu_line())
    print(f"numpy {np.__version__}, gradir {gradir.__version__}, PyTorch "
          f"{'left out' if args.no_torch else 'installed' if have_torch else 'missing'}")
    if "stack" in cases and not torch_ok:
        print("PyTorch: " + ("left out (--no-torch)" if args.no_torch else "not importable") +
              "; the stack runs gradir alone (no eager / checkpoint / torch.compile rows)")
    print(f"load average before: {', '.join(f'{x:.1f}' for x in os.getloadavg())}; threads {args.threads}; "
          f"medians of {args.repeats} alternating rounds; {'--quick' if args.quick else 'full'} sizes")
    out: dict = {"goals": []}
    with tempfile.TemporaryDirectory(prefix="bench_memory_") as logdir:
        for c in cases:
            res, goals = {"stack": lambda: run_stack(args, logdir, torch_ok), "lstm": lambda: run_lstm(args, logdir),
                          "sweep": lambda: run_sweep(args, logdir)}[c]()
            out[c] = res
            out["goals"] += goals
    print("\n## Goals (issue #33 [remat]); info: measured, not a goal (at a fallback budget); n/a: not measured")
    for name, value, ok in out["goals"]:
        tag = ("n/a" if value.startswith("n/a") else "info") if ok is None else "PASS" if ok else "MISS"
        print(f"   [{tag:>4s}] {name:<72s} {value}")
    print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.quick:
        print("   (--quick: the goals are stated for the full sizes)")
    return out


def cpu_line() -> str:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return f"CPU: {model}, {os.cpu_count()} logical CPUs"


def main(argv: Optional[list[str]] = None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
