"""``gradir check``: parse and verify .gir files."""

from __future__ import annotations

import argparse
import sys

from ..errors import GradirError
from .common import add_command


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def cmd_check(args: argparse.Namespace) -> int:
    from ..text.syntax import load
    status = 0
    for path in args.files:
        try:
            g = load(path)
        except GradirError as e:
            print(e.render(), file=sys.stderr)
            status = 1
            continue
        if not args.quiet:
            name = "<stdin>" if path == "-" else path
            print(f"{name}: ok ({_n(len(g.inputs), 'input')}, {_n(len(g.ops), 'op')}, "
                  f"{_n(len(g.outputs), 'output')})")
    return status


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``gradir check`` to the CLI's subcommands."""
    c = add_command(sub, "check", help="parse and validate .gir files (exit 1 if any is invalid)",
                    description="Parse and validate IR files. Every problem of every file is reported as "
                                "FILE:LINE:COL: error: MESSAGE; the exit code is 1 if any file is invalid.",
                    examples=["gradir check samples/mlp_forward.gir", "gradir check -q samples/*.gir",
                              "cat graph.gir | gradir check -"])
    c.add_argument("files", nargs="+", metavar="FILE", help="IR files; '-' reads standard input")
    c.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    c.set_defaults(func=cmd_check)
