"""``gradir gradcheck``: derived gradients against finite differences (the check is ``tools.gradcheck``)."""

from __future__ import annotations

import argparse
import sys

from ..ir.types import DType
from ..tools.gradcheck import DEFAULT_ATOL, DEFAULT_RTOL, gradcheck


# ---------------------------------------------------------------------------
# CLI: gradir gradcheck FORWARD.gir [--wrt t0,t3] [--seed S] [--inputs IN.npz] ...
# ---------------------------------------------------------------------------
def cmd_gradcheck(args: argparse.Namespace) -> int:
    from .run import load_inputs
    from ..text.syntax import load
    if args.generate_missing and args.inputs is None and not args.input:
        from ..errors import UsageError
        raise UsageError("gradcheck: --generate-missing completes --inputs/--input, and neither is given "
                     "(without them every input is generated)")
    graph = load(args.file)
    backward = load(args.backward) if args.backward else None
    given = load_inputs(args.inputs, args.input) if (args.inputs is not None or args.input) else None
    if any(i.type.dtype is DType.Float32 for i in graph.inputs):
        print("gradir: promoted Float32 to Float64 for the check", file=sys.stderr)
    report = gradcheck(graph, args.wrt, args.seed, given, generate_missing=args.generate_missing,
                       backward=backward, directions=args.directions, rtol=args.rtol, atol=args.atol,
                       threads=args.threads)
    if report.generated:
        from ..ir.labels import label_text
        labels = {i.name: i.label for i in graph.inputs}
        which = "every input" if given is None else ", ".join(n + label_text(labels.get(n)) for n in report.generated)
        print(f"gradir: generated {which} from seed {args.seed}", file=sys.stderr)
    what = f"the backward graph {args.backward}" if args.backward else "derived gradients"
    print(f"{what} vs float64 central finite differences along {args.directions} random unit "
          f"direction{'s' if args.directions != 1 else ''} per input "
          f"(pass: |fd - ad| <= atol + rtol*|fd|, rtol {args.rtol:g}, atol {args.atol:g})")
    print(report.table())
    for note in report.notes():
        print(note)
    bad = [c for c in report.checks if c.status != "pass"]
    if bad:
        print(f"gradir: gradcheck failed for {', '.join(f'{c.key} ({c.status})' for c in bad)}", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``gradir gradcheck`` to the CLI's subcommands."""
    from ..tools.compare import tolerance
    from .run import pair_arg, positive_int, seed_int, threads_arg
    from .common import add_command
    p = add_command(
        sub, "gradcheck", help="check derived gradients against float64 finite differences",
        description="Derive the backward graph of FORWARD.gir (or take --backward), run it, and check every\n"
                    "requested gradient against float64 central finite differences of the forward graph\n"
                    "along random unit directions (the dot-product test): one row per input, exit 1 if\n"
                    "any direction fails or cannot be checked.\n\n"
                    "For random cotangents u (one per output), L(x) = sum <u, y(x)>; for a direction v of\n"
                    "input x_i, fd is (L(x+sv) - L(x-sv))/2s at s = h and h/2, Richardson-extrapolated,\n"
                    "h = 1e-3*max(1, rms(x_i)); ad = <dL/dx_i, v> from the backward graph.  A direction\n"
                    "passes if |fd - ad| <= atol + rtol*|fd|.\n\n"
                    "Kinks (Relu at 0): when the five values of L are not smooth enough to trust fd, the\n"
                    "direction is neither passed nor failed but tried again: smaller steps, then points\n"
                    "shifted by 1e-3 and 1e-2 (relative; listed under the table).  If no try is smooth,\n"
                    "the row says 'kink' and the check does not pass.\n\n"
                    "Everything runs in Float64: a Float32 graph is promoted, and says so.",
        examples=["gradir gradcheck samples/mlp_forward.gir",
                  "gradir gradcheck samples/lstm_seq_forward.gir --wrt t1,t2 --seed 3",
                  "gradir gradcheck samples/mlp_forward.gir --backward samples/mlp_forward.grad.gir"])
    p.add_argument("file", metavar="FORWARD.gir", help="forward graph; '-' reads standard input")
    p.add_argument("--wrt", metavar="t0,t3", help="inputs to check, comma-separated (default: every "
                                                  "floating-point input)")
    p.add_argument("--seed", type=seed_int, default=0, metavar="S",
                   help="seed for generated inputs, cotangents and directions (default 0)")
    p.add_argument("--inputs", metavar="IN.npz", action="append", help="the point to check at (e.g. from gradir "
                   "run --save-inputs); repeatable, as for run (an input in two archives is an error)")
    p.add_argument("--input", metavar="tN=X.npy", action="append", default=[], type=pair_arg,
                   help="one input array (repeatable)")
    p.add_argument("--generate-missing", action="store_true",
                   help="with --inputs/--input: generate the inputs not given from --seed")
    p.add_argument("--backward", metavar="BWD.gir", help="check this backward graph (inputs: the forward "
                   "inputs, then one cotangent per output; outputs: the --wrt gradients) instead of deriving one")
    p.add_argument("--directions", type=positive_int, default=3, metavar="N", help="random directions per input "
                                                                                "(default 3)")
    p.add_argument("--rtol", type=tolerance, default=DEFAULT_RTOL, metavar="R",
                   help=f"relative tolerance (default {DEFAULT_RTOL:g})")
    p.add_argument("--atol", type=tolerance, default=DEFAULT_ATOL, metavar="A",
                   help=f"absolute tolerance (default {DEFAULT_ATOL:g})")
    p.add_argument("--threads", type=threads_arg, default=None, metavar="N",
                   help="worker threads (default: cores, max 2)")
    p.set_defaults(func=cmd_gradcheck)
