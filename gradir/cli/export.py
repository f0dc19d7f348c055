"""``gradir export``: a .gir graph as an ONNX model."""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import UsageError
from .common import add_command


def cmd_export(args: argparse.Namespace) -> int:
    from ..text.syntax import load
    from ..interop.onnx.exporter import export_onnx
    from ..interop.onnx.exporter import MIN_OPSET
    from ..interop.onnx.common import require_onnx
    if not args.output:
        raise UsageError("export: -o OUT.onnx is required (an ONNX model is binary; -o - writes it to standard output)")
    newest = require_onnx().defs.onnx_opset_version()
    if not MIN_OPSET <= args.opset <= newest:
        raise UsageError(f"export: --opset {args.opset}: gradir writes opsets {MIN_OPSET} to {newest} (the installed "
                         "onnx's newest)")
    from ..interop.onnx.ort import ort_notes
    graph = load(args.file)
    export_onnx(graph, args.output, opset=args.opset, custom_domain=args.custom_domain)  # "-": stdout
    for note in ort_notes(graph, args.opset, args.custom_domain):
        print(f"gradir: warning: ONNX Runtime cannot run this model: {note}", file=sys.stderr)
    if args.output != "-" and os.path.isfile(args.output):
        print(f"gradir: wrote {args.output} ({os.path.getsize(args.output):,} bytes)", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``gradir export`` to the CLI's subcommands."""
    from ..interop.onnx.exporter import DEFAULT_OPSET
    e = add_command(sub, "export", help="export a .gir graph as an ONNX model",
                    description="Export GRAPH as an ONNX model: standard ops as ONNX ops, ONNX Runtime's "
                                "gradient ops as their com.microsoft ops (ORT's training build runs the result), "
                                "labels as ONNX names, Constants as initializers. An op without an ONNX or ORT "
                                "counterpart of the same semantics is an error, unless --custom-domain writes it "
                                "in the ai.gradir domain (for viewing and round trips, not for ORT).",
                    examples=["gradir export samples/mlp_backward.gir -o mlp_backward.onnx",
                              "gradir export samples/lstm_cell_backward.gir --custom-domain -o cell.onnx"])
    e.add_argument("file", metavar="GRAPH", help="the .gir graph; '-' reads standard input")
    e.add_argument("-o", "--output", metavar="OUT.onnx", help="the model to write (required; - for standard output)")
    e.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"the ai.onnx opset (default {DEFAULT_OPSET})")
    e.add_argument("--custom-domain", action="store_true",
                   help="write ops without an ONNX/ORT counterpart in the ai.gradir domain")
    e.set_defaults(func=cmd_export)
