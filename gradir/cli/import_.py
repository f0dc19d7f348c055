"""``gradir import MODEL.onnx``: the command-line front end of ``import_onnx`` (docs/onnx.md);
``gradir export`` is in ``export.py``."""

from __future__ import annotations

import argparse
import sys

from ..errors import UsageError
from .common import add_command

__all__ = ["register", "values_path"]


def values_path(output: str) -> str:
    """Where ``gradir import -o OUT.gir`` writes the initializer values: ``OUT.inputs.npz``."""
    base = output[:-4] if output.endswith(".gir") else output
    return base + ".inputs.npz"


def _dim(text: str) -> tuple[str, int]:
    name, eq, size = text.partition("=")
    from ..interop.onnx.loading import MAX_DIM
    if not eq or not name or not size.strip().isdigit() or int(size) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=SIZE (a symbolic dimension and its size, at least 1), "
                                         f"got {text!r}")
    if int(size) > MAX_DIM:
        raise argparse.ArgumentTypeError(f"{text}: the size of {name} is at most {MAX_DIM:,} (2^62)")
    return name, int(size)


def cmd_import(args: argparse.Namespace) -> int:
    from ..arrayfiles import npz_bytes
    from ..fileio import check_output_paths, can_have_a_file_beside, write_files
    from ..interop.onnx.importer import import_model
    dims = dict(args.dim)
    if len(dims) != len(args.dim):
        twice = sorted({n for n, _ in args.dim if sum(1 for m, _ in args.dim if m == n) > 1})
        raise UsageError(f"import: --dim {twice[0]} is given twice")
    # -o OUT.gir also names the weights file, OUT.inputs.npz: the same checks as every output (not the
    # model, not a directory, in a directory that exists), before anything is read or written.  A device
    # (-o /dev/null), or any path under /dev or /proc (-o /dev/stdout > out.gir), has no file beside it: no
    # weights file is made up from its name.
    derived = bool(args.output and args.output != "-" and not args.values and can_have_a_file_beside(args.output))
    values = args.values or (values_path(args.output) if derived else None)
    if derived:
        check_output_paths([("MODEL", args.model)], [("-o", args.output), ("-o's weights file", values)])
    m = import_model(args.model, dims=dims, option="--dim", dropout_seed=args.dropout_seed)
    files = [(args.output or "-", m.text.encode("utf-8"))]  # "-": the graph to standard output
    if m.inputs and values is not None:
        files.append((values, npz_bytes(m.inputs, values, "the initializer values")))
    write_files(files)  # the graph and its weights both, or neither
    for note in m.notes:
        print(f"gradir: {note}", file=sys.stderr)
    if m.inputs:
        if values is None and args.output and args.output != "-":
            print(f"gradir: {len(m.inputs)} initializer{'s' if len(m.inputs) > 1 else ''} became labelled inputs; "
                  f"-o {args.output} is a device or a special path, so no weights file is written beside it: give "
                  "--values FILE.npz to save their values", file=sys.stderr)
        elif values is None:
            print(f"gradir: {len(m.inputs)} initializer{'s' if len(m.inputs) > 1 else ''} became labelled inputs; "
                  "give -o OUT.gir (writes OUT.inputs.npz) or --values FILE.npz to save their values",
                  file=sys.stderr)
        else:
            print(f"gradir: wrote the values of {len(m.inputs)} initializer input{'s' if len(m.inputs) > 1 else ''} "
                  f"to {values} (run with --inputs {values})", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``gradir import`` (and ``gradir export``, from its module) to the CLI's subcommands."""
    p = add_command(sub, "import", help="import an ONNX model or an ONNX Runtime training graph as a .gir graph",
                    description="Import MODEL.onnx: a plain ONNX model, or a training graph ONNX Runtime built "
                                "(generate_artifacts' training_model.onnx: its gradient accumulators are "
                                "stripped, so the graph outputs each <param>_grad). Inputs and outputs keep "
                                "their ONNX names as labels; each op line ends with the ONNX node it came from. "
                                "Weights (float initializers) become labelled inputs whose values are written "
                                "to OUT.inputs.npz. Needs the onnx package (pip install \"gradir[onnx]\").",
                    examples=["gradir import model.onnx -o model.gir",
                              "gradir run model.gir --inputs x.npz --inputs model.inputs.npz -o out.npz",
                              "gradir import model.onnx --dim batch=64 -o model.gir"])
    p.add_argument("model", metavar="MODEL", help="the .onnx file")
    p.add_argument("-o", "--output", metavar="OUT", help="write the graph to OUT (.gir) and the initializer values "
                                                         "to OUT.inputs.npz; default: the graph to standard output")
    p.add_argument("--values", metavar="FILE.npz", help="write the initializer values here instead")
    p.add_argument("--dim", metavar="NAME=SIZE", type=_dim, action="append", default=[],
                   help="give a symbolic input dimension a size (repeatable), so shape computations fold")
    p.add_argument("--dropout-seed", metavar="S", type=int, default=None,
                   help="Dropouts without a seed draw ONNX Runtime's masks after onnxruntime.set_seed(S): the k-th "
                        "(in node order) with seed S+k")
    p.set_defaults(func=cmd_import)

    from . import export
    export.register(sub)
