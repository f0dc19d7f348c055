"""The ``gradir`` command line: a thin argparse front end over the public API.

Exit codes: 0 success, 1 a problem with the user's files or data (reported as
located ``FILE:LINE:COL: error: ...`` lines, never a traceback), 2 usage errors,
3 an internal error (a bug in gradir; ``--traceback`` shows it).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import Any, Callable, Optional, Sequence

from ..errors import GradirError, StdoutError, UsageError
from ..fileio import Terminated, check_output_paths, terminate_cleanly
from .common import add_ops_option, load_user_ops

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit code 2, one line, no traceback
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    p = _Parser(prog="gradir", allow_abbrev=False,
                description="Compile, check and run backward (gradient) graphs written in the gradir IR.")
    p.add_argument("--version", action="version", version=f"gradir {__version__}")
    p.add_argument("--traceback", action="store_true", help="show Python tracebacks (for debugging gradir)")
    # no abbreviated options: `gradir --trace run g.gir` must not mean --traceback
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    from . import check, fmt, ops
    for command in (check, fmt, ops):
        command.register(sub)

    for register in _EXTRA_COMMANDS:
        register(sub)
    for name, parser in sub.choices.items():  # --traceback after the subcommand works too
        parser.add_argument("--traceback", action="store_true", default=argparse.SUPPRESS,
                            help="show Python tracebacks (for debugging gradir)")
        add_ops_option(parser)
    return p


# Options whose values are files a command reads, and files it writes: an output may never be an input.
_INPUT_OPTIONS = {"file": "FILE", "files": "FILE", "inputs": "--inputs", "input": "--input", "compare": "--compare",
                  "backward": "--backward", "model": "MODEL", "ops_files": "--ops"}
_OUTPUT_OPTIONS = {"output": "-o", "trace": "--trace", "save_inputs": "--save-inputs", "svg": "--svg",
                   "png": "--png", "values": "--values"}


def _paths(args: argparse.Namespace, options: dict[str, str]) -> list[tuple[str, str]]:
    out = []
    for attr, flag in options.items():
        value: Any = getattr(args, attr, None)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str):
                out.append((flag, v.partition("=")[2] if attr == "input" else v))
    return out


class _GuardedStdout:
    """``sys.stdout`` whose write errors (other than a closed pipe) become ``StdoutError``."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(e) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(e) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    """After a failed write, point standard output at /dev/null so the interpreter's final
    flush of what is still buffered cannot fail again (and print a traceback)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (captured in tests): nothing to flush
        pass


def _extra_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
    from . import dot
    from . import grad as gradcli, run as runcli
    from .gradcheck import register as register_gradcheck
    from . import import_ as onnx_cli
    return [runcli.register, gradcli.register, register_gradcheck, dot.register, onnx_cli.register]


# Later layers (runtime, autodiff) add their subcommands here.
_EXTRA_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = _extra_commands()


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    real_stdout = sys.stdout
    sys.stdout = _GuardedStdout(real_stdout)  # type: ignore[assignment]
    args: Optional[argparse.Namespace] = None
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help, --version (0) or a usage error (2): a return value, for callers
            sys.stdout.flush()
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return 2
        terminate_cleanly()
        inputs = _paths(args, _INPUT_OPTIONS)
        if isinstance(getattr(args, "shard_files", None), str):  # every shard file the run reads is an input
            import glob
            inputs += [("--shard-files", p) for p in sorted(glob.glob(args.shard_files))]
        stdin = [w for w, p in inputs if p == "-"]
        if len(stdin) > 1 or any(w not in ("FILE",) for w in stdin):
            raise UsageError("only FILE may be '-' (standard input), and only once"
                             + (f"; {stdin[-1]} reads a file" if stdin[-1] != "FILE" else ""))
        check_output_paths(inputs, _paths(args, _OUTPUT_OPTIONS),
                           hint="gradir fmt -i FILE rewrites it in place" if args.command == "fmt" else None)
        load_user_ops(getattr(args, "ops_files", None) or [])
        status = int(args.func(args) or 0)
        sys.stdout.flush()
        return status
    except GradirError as e:
        if getattr(args, "traceback", False):
            traceback.print_exc()
        print(e.render(), file=sys.stderr)
        return 1
    except StdoutError as e:
        print(f"gradir: error: {e}", file=sys.stderr)
        sys.stdout = real_stdout
        _silence_stdout()
        return 1
    except UsageError as e:
        print(f"gradir: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gradir: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("gradir: terminated", file=sys.stderr)
        return 143
    except BrokenPipeError:
        sys.stdout = real_stdout
        _silence_stdout()
        return 0
    except MemoryError:
        print("gradir: error: out of memory", file=sys.stderr)
        return 1
    except Exception as e:  # a bug in gradir: say so, briefly
        if getattr(args, "traceback", False):
            traceback.print_exc()
        else:
            print(f"gradir: internal error: {type(e).__name__}: {e} (rerun with --traceback and report it)",
                  file=sys.stderr)
        return 3
    finally:
        if sys.stdout is not real_stdout:
            sys.stdout = real_stdout


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
