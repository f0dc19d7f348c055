"""``gradir grad FILE [--wrt t0,t3] [-o OUT.gir]``: ``gradir.autodiff.driver``'s command-line front end."""

from __future__ import annotations

import argparse
import sys

from ..autodiff.driver import grad_text
from .common import add_command

__all__ = ["register"]


def cmd_grad(args: argparse.Namespace) -> int:
    from ..text.syntax import load
    text = grad_text(load(args.file), args.wrt)
    if args.output:
        from ..fileio import write_file
        write_file(args.output, text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``gradir grad`` to the CLI's subcommands."""
    p = add_command(sub, "grad", help="derive the backward (vector-Jacobian) graph of a forward graph",
                    description="Derive the backward graph of FILE. Its inputs are FILE's inputs followed "
                                "by one cotangent per output of FILE; its outputs are the gradients "
                                "w.r.t. --wrt (default: every floating-point input), in that order. "
                                "The result runs with `gradir run`.",
                    examples=["gradir grad samples/mlp_forward.gir -o mlp.grad.gir",
                              "gradir grad samples/mlp_forward.gir --wrt t1,t3 | gradir run -"])
    p.add_argument("file", metavar="FILE", help="forward graph (.gir); '-' reads standard input")
    p.add_argument("--wrt", metavar="t0,t3", help="comma-separated inputs to differentiate with respect to, "
                                                  "by name (t0) or label (default: every floating-point input)")
    p.add_argument("-o", "--output", metavar="OUT", help="write to OUT (atomically) instead of standard output")
    p.set_defaults(func=cmd_grad)
