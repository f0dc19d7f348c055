"""The ``gradir`` command line: a thin argparse front end over the public API.

Exit codes: 0 success, 1 a problem with the user's files or data (reported as
located ``FILE:LINE:COL: error: ...`` lines, never a traceback), 2 usage errors,
3 an internal error (a bug in gradir; ``--traceback`` shows it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from typing import Callable, Optional, Sequence

from .errors import GradirError

__all__ = ["main"]


def _write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename: never a half-written file.

    A symbolic link is followed (its target is rewritten, the link kept).  An
    ``OSError`` becomes a ``GradirError`` naming the file.
    """
    try:
        _write_atomic_raw(os.path.realpath(path), data)
    except OSError as e:
        from .errors import Diagnostic
        raise GradirError(Diagnostic(f"cannot write file: {e.strerror or e}", filename=path)) from None


def _write_atomic_raw(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".gradir-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        except OSError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def cmd_check(args: argparse.Namespace) -> int:
    from .syntax import load
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


def cmd_fmt(args: argparse.Namespace) -> int:
    """Canonical text of each FILE; a file that does not parse is reported and the others still done."""
    from .syntax import parse, read_source
    if args.in_place and "-" in args.files:
        raise _Usage("fmt: -i needs a file, not '-' (standard input)")
    if len(args.files) > 1 and "-" in args.files:
        raise _Usage("fmt: '-' (standard input) must be the only FILE")
    if len(args.files) > 1 and not (args.in_place or args.check):
        raise _Usage("fmt: several FILEs need -i or --check (standard output and -o take one)")
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
                _write_atomic(path, encoded)
        elif args.output:
            _write_atomic(args.output, encoded)
        else:
            sys.stdout.write(text)
    return status


def cmd_ops(args: argparse.Namespace) -> int:
    import difflib
    from .docs import ops_markdown, ops_text
    from .ir import OPS
    unknown = [n for n in args.names if n not in OPS]
    if unknown:
        for n in unknown:
            hint = difflib.get_close_matches(n, list(OPS), n=1)
            print(f"gradir: error: no op named '{n}'" + (f"; did you mean '{hint[0]}'?" if hint else ""),
                  file=sys.stderr)
        return 1
    if args.markdown:
        sys.stdout.write(ops_markdown())
    else:
        sys.stdout.write(ops_text(args.names))
    return 0


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit code 2, one line, no traceback
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    p = _Parser(prog="gradir", description="Compile, check and run backward (gradient) graphs written in "
                                           "the gradir IR.")
    p.add_argument("--version", action="version", version=f"gradir {__version__}")
    p.add_argument("--traceback", action="store_true", help="show Python tracebacks (for debugging gradir)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    c = sub.add_parser("check", help="parse and validate .gir files (exit 1 if any is invalid)")
    c.add_argument("files", nargs="+", metavar="FILE", help="IR files; '-' reads standard input")
    c.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    c.set_defaults(func=cmd_check)

    f = sub.add_parser("fmt", help="print .gir files in canonical form (comments and blank lines kept)")
    f.add_argument("files", nargs="+", metavar="FILE", help="IR files; '-' reads standard input")
    g = f.add_mutually_exclusive_group()
    g.add_argument("-i", "--in-place", action="store_true", help="rewrite each file in place (atomically)")
    g.add_argument("-o", "--output", metavar="OUT", help="write to OUT instead of standard output")
    g.add_argument("--check", action="store_true", help="exit 1 if any file is not already canonical")
    f.set_defaults(func=cmd_fmt)

    o = sub.add_parser("ops", help="list every op: operands, attributes, defaults, summary")
    o.add_argument("names", nargs="*", metavar="OP", help="show only these ops")
    o.add_argument("--markdown", action="store_true", help="print a Markdown reference page")
    o.set_defaults(func=cmd_ops)

    for register in _EXTRA_COMMANDS:
        register(sub)
    return p


def _extra_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
    from . import autodiff, runcli
    return [runcli.register, autodiff.register_cli]


# Later layers (runtime, autodiff) add their subcommands here.
_EXTRA_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = _extra_commands()


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except GradirError as e:
        if args.traceback:
            traceback.print_exc()
        print(e.render(), file=sys.stderr)
        return 1
    except _Usage as e:
        print(f"gradir: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gradir: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except MemoryError:
        print("gradir: error: out of memory", file=sys.stderr)
        return 1
    except Exception as e:  # a bug in gradir: say so, briefly
        if args.traceback:
            traceback.print_exc()
        else:
            print(f"gradir: internal error: {type(e).__name__}: {e} (rerun with --traceback and report it)",
                  file=sys.stderr)
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
