"""``gradir ops``: the registered ops, as text or as the Markdown of docs/ops.md."""

from __future__ import annotations

import argparse
import sys

from .common import add_command


def cmd_ops(args: argparse.Namespace) -> int:
    import difflib
    from ..tools.docs import ops_markdown, ops_text
    from ..ir.op import OPS
    unknown = [n for n in args.names if n not in OPS]
    if unknown:
        for n in unknown:
            hint = difflib.get_close_matches(n, list(OPS), n=1)
            print(f"gradir: error: no op named '{n}'" + (f"; did you mean '{hint[0]}'?" if hint else ""),
                  file=sys.stderr)
        return 1
    if args.markdown:
        sys.stdout.write(ops_markdown(args.names))
    else:
        sys.stdout.write(ops_text(args.names))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``gradir ops`` to the CLI's subcommands."""
    o = add_command(sub, "ops", help="list every op: operands, attributes, defaults, summary",
                    description="List the registered ops with their operands, attributes, defaults and a "
                                "summary, or only the ops named.",
                    examples=["gradir ops Relu LSTMGrad", "gradir ops --markdown > docs/ops.md"])
    o.add_argument("names", nargs="*", metavar="OP", help="show only these ops")
    o.add_argument("--markdown", action="store_true", help="print Markdown (the page docs/ops.md)")
    o.set_defaults(func=cmd_ops)
