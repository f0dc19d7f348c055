"""``gradir fmt``: print .gir files in canonical form, or rewrite them in place."""

from __future__ import annotations

import argparse
import sys

from ..errors import GradirError, UsageError
from ..fileio import write_file
from .common import add_command


def cmd_fmt(args: argparse.Namespace) -> int:
    """Canonical text of each FILE; a file that does not parse is reported and the others still done."""
    from ..text.syntax import parse, read_source
    if args.in_place and "-" in args.files:
        raise UsageError("fmt: -i needs a file, not '-' (standard input)")
    if len(args.files) > 1 and "-" in args.files:
        raise UsageError("fmt: '-' (standard input) must be the only FILE")
    if len(args.files) > 1 and not (args.in_place or args.check):
        raise UsageError("fmt: several FILEs need -i or --check (standard output and -o take one)")
    status = 0
    for path in args.files:
        try:
            data, name = read_source(path)
            text = parse(data, name).to_text()
        except GradirError as e:
            print(e.render(), file=sys.stderr)
            status = 1
            continue
        encoded = text.encode("utf-8")
        if args.check:
            if data != encoded:
                print(f"{name}: not in canonical form (gradir fmt -i {path} rewrites it)", file=sys.stderr)
                status = 1
        elif args.in_place:
            if data != encoded:
                write_file(path, encoded)
        elif args.output:
            write_file(args.output, encoded)
        else:
            sys.stdout.write(text)
    return status


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``gradir fmt`` to the CLI's subcommands."""
    f = add_command(sub, "fmt", help="print .gir files in canonical form (comments and blank lines kept)",
                    description="Print FILE in gradir's canonical form, comments kept and runs of blank lines "
                                "collapsed to one (docs/format.md says exactly what it prints). With several "
                                "files: --check exits 1 if any is not canonical; -i rewrites each in place, "
                                "atomically.",
                    examples=["gradir fmt graph.gir", "gradir fmt -i graph.gir", "gradir fmt --check samples/*.gir"])
    f.add_argument("files", nargs="+", metavar="FILE", help="IR files; '-' reads standard input")
    g = f.add_mutually_exclusive_group()
    g.add_argument("-i", "--in-place", action="store_true", help="rewrite each file in place (atomically)")
    g.add_argument("-o", "--output", metavar="OUT", help="write to OUT instead of standard output")
    g.add_argument("--check", action="store_true", help="exit 1 if any file is not already canonical")
    f.set_defaults(func=cmd_fmt)
