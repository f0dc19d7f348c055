"""``gradir dot``: a graph or its plan as Graphviz DOT, SVG or PNG (the drawing is ``tools.dot``)."""

from __future__ import annotations

import argparse
import sys

from ..errors import RenderError, UsageError
from ..tools.dot import render, to_dot


def cmd_dot(args: argparse.Namespace) -> int:
    from ..fileio import write_file
    from ..text.syntax import load
    disable = [p.strip() for d in args.disable for p in d.split(",") if p.strip()]
    if disable and not args.plan:
        raise UsageError("dot: --disable only applies with --plan")
    if disable:
        from ..transforms.passes.pipeline import DEFAULT_PASSES, PASSES
        unknown = [d for d in disable if d not in PASSES]
        if unknown:
            raise UsageError(f"dot: unknown pass '{unknown[0]}'; the passes are {', '.join(DEFAULT_PASSES)}")
    text = to_dot(load(args.file), plan=args.plan, disable=disable)
    if args.output:
        write_file(args.output, text.encode("utf-8"))
    if not (args.output or args.svg or args.png):
        sys.stdout.write(text)
        return 0
    for fmt, path in (("svg", args.svg), ("png", args.png)):
        if path:
            try:
                data = render(text, fmt)
            except RenderError as e:
                e.diagnostics[-1].message += (f"; the DOT text was written to {args.output}" if args.output
                                              else "; or use -o OUT.dot to write the DOT text")
                raise
            write_file(path, data)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``gradir dot`` to the CLI's subcommands."""
    from .common import add_command
    p = add_command(
        sub, "dot", help="draw a graph (or, with --plan, its compiled schedule) as Graphviz DOT, SVG or PNG",
        description="Write FILE's graph as Graphviz DOT (to standard output unless -o, --svg or --png is\n"
                    "given). Inputs are blue ellipses, outputs green double ellipses, ops boxes (grey:\n"
                    "forward, orange: backward) with their non-default attributes and source line; each\n"
                    "edge is a value, labelled with its name and type. With --plan, the compiled graph:\n"
                    "steps numbered in schedule order, in-place reuse and frees noted, fused ops drawn as\n"
                    "a cluster of the ops they replace. --svg and --png need Graphviz's 'dot' program.",
        examples=["gradir dot samples/mlp_forward.gir --svg mlp.svg",
                  "gradir dot --plan samples/lstm_cell_backward.gir -o cell.dot --png cell.png"])
    p.add_argument("file", metavar="FILE", help="IR file ('-' reads standard input)")
    p.add_argument("-o", "--output", metavar="OUT.dot", help="write the DOT text to OUT.dot (atomically)")
    p.add_argument("--svg", metavar="OUT.svg", help="render an SVG picture with Graphviz's dot")
    p.add_argument("--png", metavar="OUT.png", help="render a PNG picture with Graphviz's dot")
    p.add_argument("--plan", action="store_true", help="draw the compiled graph: passes applied, schedule order, "
                                                      "in-place reuse, frees and fused groups")
    p.add_argument("--disable", action="append", default=[], metavar="PASS",
                   help="with --plan: switch passes off (repeatable, or comma-separated)")
    p.set_defaults(func=cmd_dot)
