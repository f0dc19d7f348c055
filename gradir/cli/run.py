"""``gradir run`` and ``gradir plan``: the runtime's command-line front end."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..arrayfiles import read_npz
from ..ir.graph import Graph
from .shard_options import add_plan_arguments, add_run_arguments, check_run_arguments, print_placements, sharded_runs
from ..ir.types import DType
from ..tools.inputs import check_generated, complete_inputs, demo_inputs, load_inputs  # noqa: F401

if TYPE_CHECKING:
    from ..backends.cpu.runtime import Executable

__all__ = ["register", "demo_inputs", "complete_inputs", "load_inputs", "read_npz", "save_outputs"]

# (the inputs a run is given or draws live in ``gradir.tools.inputs``: ``gradcheck`` draws them too)


def save_outputs(path: str, outputs: dict[str, np.ndarray], what: str = "outputs") -> None:
    """Write arrays (outputs, or with ``what="inputs"`` inputs) to an .npz under their keys (a value's label
    where it has one, else its name), atomically."""
    from ..arrayfiles import write_npz
    write_npz(path, outputs, what)


def _stats(a: np.ndarray) -> tuple[list[str], int]:
    """min, max, mean and L2 norm of ``a``'s values that are not NaN (Inf counts: it shows as inf), and
    how many NaNs were left out; every value NaN gives ``nan`` for each."""
    if not a.size or a.dtype.kind not in "fiub":
        return ["-"] * 4, 0
    f = a.astype(np.float64, copy=False).ravel()
    nans = int(np.count_nonzero(np.isnan(f))) if a.dtype.kind == "f" else 0
    if nans:
        f = f[~np.isnan(f)]
        if not f.size:
            return ["nan"] * 4, nans
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf in the mean is nan, as it should be
        return [f"{f.min():.6g}", f"{f.max():.6g}", f"{f.mean():.6g}", f"{np.sqrt(np.sum(f * f)):.6g}"], nans


def _stats_table(outputs: dict[str, np.ndarray]) -> str:
    """One row per output; the statistics skip NaNs, and a ``NaNs`` column (only when some output holds
    one) says how many each output holds, so that none is hidden."""
    from ..ir.types import format_shape
    rows = [["output", "dtype", "shape", "min", "max", "mean", "L2 norm"]]
    counts = []
    for name, a in outputs.items():
        try:
            dt = DType.from_numpy(a.dtype).value
        except ValueError:
            dt = str(a.dtype)
        stats, nans = _stats(a)
        rows.append([name, dt, format_shape(a.shape), *stats])
        counts.append(nans)
    if any(counts):
        rows[0].append("NaNs")
        for r, n, a in zip(rows[1:], counts, outputs.values()):
            r.append(("all " if n == a.size else "") + str(n) if n else "0")
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    lines = []
    for j, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if k < 3 else c.rjust(w) for k, (c, w) in enumerate(zip(r, widths))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _progress(k: int, n: int, stream) -> None:
    width = 30
    done = int(width * k / n)
    stream.write(f"\r[{'#' * done}{'.' * (width - done)}] {k}/{n}")
    if k == n:
        stream.write("\n")
    stream.flush()


def _fmt_time(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.3f} s"


def _warn_non_finite(outputs: dict[str, np.ndarray]) -> None:
    """One line on stderr when outputs hold NaN or Inf (the table's statistics leave NaNs out and count them)."""
    parts = []
    for name, a in outputs.items():
        if a.dtype.kind == "f" and a.size:
            counts = {"NaN": int(np.count_nonzero(np.isnan(a))), "Inf": int(np.count_nonzero(np.isinf(a)))}
            if any(counts.values()):
                parts.append(f"{name} ({', '.join(f'{c} {k}' for k, c in counts.items() if c)})")
    if parts:
        print(f"gradir: warning: non-finite values in {', '.join(parts)}; --check-numerics names the op that made "
              f"the first", file=sys.stderr)


def _disabled_passes(args: argparse.Namespace) -> list[str]:
    """``--disable`` values (repeatable, comma-separated), checked against the pass registry."""
    from ..transforms.passes.pipeline import DEFAULT_PASSES, PASSES
    disable = [p.strip() for d in args.disable for p in d.split(",") if p.strip()]
    unknown = [d for d in disable if d not in PASSES]
    if unknown:
        from ..errors import UsageError
        raise UsageError(f"{args.command}: unknown pass '{unknown[0]}'; the passes are {', '.join(DEFAULT_PASSES)}")
    return disable


# Seconds of compiling after which ``run``/``plan`` say why nothing is printed yet: the first
# process on a machine builds the compiled kernels (numba, ~30 s), later ones load them.
SLOW_COMPILE_NOTICE = 2.0


def _compile_with_notice(compile_fn, graph: Graph, **kw: object) -> "Executable":  # type: ignore[no-untyped-def]
    """``compile_fn(graph, **kw)``, with a line on stderr if it takes longer than
    ``SLOW_COMPILE_NOTICE`` seconds (building the compiled kernels on a new machine), when
    stderr is a terminal (scripts that read it get only results and errors)."""
    import threading
    if not sys.stderr.isatty():
        return compile_fn(graph, **kw)
    done = threading.Event()

    def notice() -> None:
        if not done.wait(SLOW_COMPILE_NOTICE):
            print("gradir: building the compiled kernels for this machine (once: later runs load them "
                  "from numba's cache) ...", file=sys.stderr, flush=True)

    t = threading.Thread(target=notice, daemon=True)
    t.start()
    try:
        return compile_fn(graph, **kw)
    finally:
        done.set()
        t.join()


def cmd_run(args: argparse.Namespace) -> int:
    from ..backends.cpu.runtime import compile
    from ..text.syntax import load
    from ..errors import UsageError
    if (args.rtol is not None or args.atol is not None) and not args.compare:
        raise UsageError("run: --rtol and --atol are tolerances for --compare")
    if args.generate_missing and not args.inputs and not args.input:
        raise UsageError("run: --generate-missing completes --inputs/--input, and neither is given "
                         "(without them every input is generated)")
    check_run_arguments(args)
    disable = _disabled_passes(args)
    check_run_arguments(args, graph := load(args.file))  # --shard's placements: refused before any input
    from ..arrayfiles import check_npz_keys
    from ..ir.labels import input_key, output_keys
    if args.output:  # a key that cannot be an .npz member is refused now, not after the run
        check_npz_keys(output_keys(graph), args.output, "outputs")
    if args.save_inputs:
        check_npz_keys([input_key(i) for i in graph.inputs], args.save_inputs, "inputs")
    reference = read_npz(args.compare, "--compare") if args.compare else None  # a bad file fails before the run
    if args.memory_budget is not None and args.shard:
        raise UsageError("run: --memory-budget does not combine with --shard (each shard would need its own plan)")
    exe = _compile_with_notice(compile, graph, threads=args.threads, disable=disable, backend=args.backend,
                               memory_budget=args.memory_budget)
    # with --shard-files, the split inputs come from the shard files: never generated, never given here
    from_files = set(args.sharded.batch) if args.shard and args.shard_files else set()
    if not args.inputs and not args.input:
        inputs, generated = complete_inputs(graph, {}, args.seed)
        print(f"gradir: no inputs given; generated every input{' not in the shard files' if from_files else ''} "
              f"from seed {args.seed} (a demo run)", file=sys.stderr)
    else:
        from ..ir.labels import inputs_by_name
        inputs, generated = inputs_by_name(graph, load_inputs(args.inputs, args.input),
                                           ", ".join(args.inputs or []) or None), []
        from .shard_options import check_not_in_shard_files
        check_not_in_shard_files(args, inputs)
        if args.generate_missing:
            inputs, generated = complete_inputs(graph, inputs, args.seed)
            generated = [n for n in generated if n not in from_files]
            from ..ir.labels import label_text
            labels = {i.name: i.label for i in graph.inputs}
            print(f"gradir: generated {', '.join(n + label_text(labels.get(n)) for n in generated)} from seed "
                  f"{args.seed}" if generated else
                  "gradir: every input was given; none generated", file=sys.stderr)
    if from_files:
        inputs = {k: v for k, v in inputs.items() if k not in from_files}
        generated = [n for n in generated if n not in from_files]
    else:  # (with shard files, the shards check their inputs, the split ones being there)
        check_generated(exe, inputs, generated, args.file)
    if args.save_inputs:  # before the run, so that a failing run can be reproduced from them
        saved = inputs
        if from_files:  # what the run uses: the split inputs whole, put together from the shard files
            from .shard_options import split_from_files
            split = split_from_files(args)
            saved = {i.name: split[i.name] if i.name in split else inputs[i.name]
                     for i in graph.inputs if i.name in split or i.name in inputs}
            saved.update((k, v) for k, v in inputs.items() if k not in saved)  # check_inputs names the strays
        exe.check_inputs(saved)
        from ..ir.labels import keyed_by_label
        save_outputs(args.save_inputs, keyed_by_label(graph, saved), "inputs")
        print(f"wrote {len(saved)} input{'s' if len(saved) != 1 else ''} to {args.save_inputs}"
              + (" (the split inputs put together from the shard files)" if from_files else ""))
    trace: Optional[list] = [] if args.trace else None
    times = []
    show = args.repeat > 1 and sys.stderr.isatty()
    outputs = {}
    how = f"{exe.threads} thread{'s' if exe.threads > 1 else ''}"
    if args.shard:  # data-parallel shards (gradir.cli.shard_options)
        outputs, times, how = sharded_runs(args, inputs)
    for k in range(0 if args.shard else args.repeat):
        t0 = time.perf_counter()
        outputs = exe.run(inputs, check_numerics=args.check_numerics,
                          trace=trace if (trace is not None and k == args.repeat - 1) else None)
        times.append(time.perf_counter() - t0)
        if show:
            _progress(k + 1, args.repeat, sys.stderr)
    # with -o - (or --trace -, or -o /dev/stdout) standard output carries the file: the report goes to stderr
    from ..fileio import is_stdout
    report = sys.stderr if is_stdout(args.output) or is_stdout(args.trace) else sys.stdout
    print(_stats_table(outputs), file=report)
    _warn_non_finite(outputs)
    if args.repeat > 1:
        print(f"time: min {_fmt_time(min(times))}, median {_fmt_time(statistics.median(times))} over "
              f"{args.repeat} runs ({how})", file=report)
    else:
        print(f"time: {_fmt_time(times[0])} ({how})", file=report)
    if args.output:
        save_outputs(args.output, outputs)
        print(f"wrote {len(outputs)} output{'s' if len(outputs) != 1 else ''} to {args.output}", file=report)
    if trace is not None:
        import json
        from ..fileio import write_file
        doc = {"traceEvents": trace, "displayTimeUnit": "ms",
               "otherData": {"graph": graph.name or args.file, "threads": exe.threads}}
        write_file(args.trace, json.dumps(doc).encode("utf-8"))
        print(f"wrote a trace of {len(trace)} ops to {args.trace} (open it in Perfetto or chrome://tracing)",
              file=report)
    if reference is not None:
        from ..tools.compare import report_comparison
        return report_comparison(outputs, reference, args.compare, args.rtol, args.atol)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from ..transforms.passes.pipeline import DEFAULT_PASSES, PASSES
    from ..backends.cpu.runtime import compile
    from ..text.syntax import load
    if args.list_passes:
        for name in DEFAULT_PASSES:
            print(f"{name}: {PASSES[name].doc}")
        return 0
    if not args.file:
        from ..errors import UsageError
        raise UsageError("plan: a FILE is needed")
    if args.shard:
        if args.memory_budget is not None:
            from ..errors import UsageError
            raise UsageError("plan: --memory-budget does not combine with --shard")
        return print_placements(args)
    disable = _disabled_passes(args)
    graph = load(args.file)
    exe = _compile_with_notice(compile, graph, threads=args.threads, disable=disable,
                               memory_budget=args.memory_budget)
    p = exe.program
    from ..ir.labels import output_labels_of
    # the outputs keep their labels (live_outputs has one value per output, in order, after CSE merged some)
    optimized = Graph(graph.inputs, p.ops, p.live_outputs, graph.name, output_labels=output_labels_of(graph))
    optimized.types = p.types
    sys.stdout.write(optimized.to_text())
    sys.stdout.write(exe.plan.describe())
    return 0


def _int_at_least(minimum: int, what: str, maximum: Optional[int] = None):
    """An argparse type: an integer >= ``minimum`` (and <= ``maximum``), at most 18 digits."""
    def parse(text: str) -> int:
        try:
            n = int(text) if len(text.strip()) <= 19 else None
        except ValueError:
            n = None
        if n is None or n < minimum or (maximum is not None and n > maximum):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text[:40]!r}")
        return n
    return parse


def _threads_type():
    from ..backends.cpu.runtime import MAX_THREADS
    return _int_at_least(1, f"a positive integer up to {MAX_THREADS}", MAX_THREADS)


threads_arg = _threads_type()


positive_int = _int_at_least(1, "a positive integer")
seed_int = _int_at_least(0, "a non-negative integer")


def budget_arg(text: str) -> object:
    """An argparse type: a memory budget (``512MiB``, ``2GB``, bytes, ``auto``); a bad one is a usage error."""
    from ..errors import ArgumentError
    from ..transforms.memory.budget import parse_budget
    try:
        return parse_budget(text)
    except ArgumentError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


MEMORY_BUDGET_HELP = ("bound the planned peak memory (inputs and outputs included) to SIZE: 512MiB, 1.5GiB, 2GB, "
                      "bytes, 25%% (of the peak planned without a budget), or auto (the knee of the peak/time "
                      "curve); the plan recomputes values to fit, with the same bits, or says before running what "
                      "the least feasible budget is (docs/memory.md)")


def pair_arg(text: str) -> str:
    name, eq, path = text.partition("=")
    if not eq or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE.npy, got {text!r}")
    return text


def register(sub: argparse._SubParsersAction) -> None:
    from .common import add_command
    r = add_command(sub, "run", help="compile and run a graph; print a summary of the outputs",
                    description="Compile FILE and run it. Inputs come from --inputs/--input; with none, every "
                                "input is generated from --seed (a demo run, said on stderr). Prints each "
                                "output's dtype, shape, min, max, mean and L2 norm (NaNs left out, and "
                                "counted), and the time.",
                    examples=["gradir run samples/lstm_bptt.gir",
                              "gradir run samples/mlp_forward.gir --save-inputs in.npz -o out.npz",
                              "gradir run samples/mlp_forward.gir --inputs in.npz --compare out.npz",
                              "gradir run samples/mlp_forward.gir --input t1=w1.npy --generate-missing",
                              "gradir run samples/mlp_forward.grad.gir --memory-budget 20KiB",
                              "gradir run g.gir --repeat 20 --threads 1 --trace trace.json",
                              "gradir run samples/mlp_forward.grad.gir --shard t0:0,t11:0 --scheduler local:2"])
    r.add_argument("file", metavar="FILE", help="IR file ('-' reads standard input)")
    r.add_argument("--inputs", metavar="IN.npz", action="append", help="input arrays keyed by label or value name "
                   "(loaded with pickles disabled); repeatable, e.g. the model's inputs and the weights `gradir "
                   "import` wrote")
    r.add_argument("--input", metavar="tN=X.npy", action="append", default=[], type=pair_arg,
                   help="one input array, by value name or label (repeatable)")
    r.add_argument("-o", "--output", metavar="OUT.npz", help="save the outputs under their labels (value names "
                   "where they have none)")
    r.add_argument("--threads", type=threads_arg, default=None, metavar="N",
                   help="worker threads, up to 1024 (default: the number of cores, at most 2); results are the "
                        "same bits for any N")
    r.add_argument("--seed", type=seed_int, default=0, metavar="S", help="seed for generated inputs (default 0)")
    r.add_argument("--repeat", type=positive_int, default=1, metavar="N", help="run N times; report min/median time")
    r.add_argument("--trace", metavar="TRACE.json", help="write a Chrome trace-event file (one event per op)")
    r.add_argument("--check-numerics", action="store_true",
                   help="check the inputs, then stop at the first op producing NaN or Inf and name it")
    r.add_argument("--disable", action="append", default=[], metavar="PASS",
                   help="switch compiler passes off (repeatable, or comma-separated; see plan --list-passes)")
    from ..backends.base import BACKENDS
    r.add_argument("--backend", choices=sorted(BACKENDS), default="cpu",
                   help="what runs the compiled schedule: cpu (the thread pool, default) or reference (one step "
                        "after another, fresh arrays; the same bits)")
    from ..tools.compare import tolerance
    r.add_argument("--save-inputs", metavar="IN.npz", help="save the inputs used (given or generated), to repeat "
                                                           "the run or check it elsewhere")
    r.add_argument("--generate-missing", action="store_true",
                   help="with --inputs/--input: generate the inputs not given, as a --seed demo run would")
    r.add_argument("--compare", metavar="REF.npz", help="compare each output with REF's array of its name (same "
                   "shape and dtype; NaN matches NaN in place); exit 1 if one is missing or differs")
    r.add_argument("--rtol", type=tolerance, metavar="R", help="--compare's relative tolerance: an element "
                   "passes if |a - r| <= atol + rtol*|r| (default: 1.3e-6 Float32, 1e-7 Float64, 0 integers)")
    r.add_argument("--atol", type=tolerance, metavar="A", help="--compare's absolute tolerance (default: 1e-5 "
                                                               "Float32, 1e-7 Float64, 0 integers)")
    r.add_argument("--memory-budget", type=budget_arg, default=None, metavar="SIZE", help=MEMORY_BUDGET_HELP)
    add_run_arguments(r)
    r.set_defaults(func=cmd_run)

    p = add_command(sub, "plan", help="print the optimized IR, the schedule and the planned peak memory",
                    description="Compile FILE and print the graph after the compiler passes, what each pass "
                                "did, the schedule (in-place reuse, frees, BLAS steps) and the planned peak "
                                "memory next to the naive total.",
                    examples=["gradir plan samples/lstm_cell_backward.gir",
                              "gradir plan g.gir --disable cse,dce", "gradir plan --list-passes",
                              "gradir plan samples/mlp_forward.grad.gir --memory-budget auto",
                              "gradir plan samples/mlp_forward.grad.gir --shard t0:0,t11:0"])
    p.add_argument("file", metavar="FILE", nargs="?", help="IR file ('-' reads standard input)")
    p.add_argument("--disable", action="append", default=[], metavar="PASS",
                   help="switch passes off (repeatable, or comma-separated)")
    p.add_argument("--list-passes", action="store_true", help="list the compiler passes, in pipeline order")
    p.add_argument("--threads", type=threads_arg, default=None, metavar="N",
                   help="plan for N worker threads, up to 1024 (default: the number of cores, at most 2)")
    p.add_argument("--memory-budget", type=budget_arg, default=None, metavar="SIZE",
                   help=MEMORY_BUDGET_HELP + "; prints what is recomputed and the budget/peak/time curve")
    add_plan_arguments(p)
    p.set_defaults(func=cmd_plan)
