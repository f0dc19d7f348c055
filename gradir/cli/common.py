"""How a module adds its subcommand to the ``gradir`` command line, and the options every subcommand shares
(``--ops FILE``: user-defined ops).

Each subcommand's module in ``gradir.cli`` has a ``register(sub)`` that calls :func:`add_command`;
``cli.main`` calls those.  ``add_command`` lives here, apart from ``main``, so that no subcommand
imports ``main`` back.
"""

from __future__ import annotations

import argparse
from typing import Sequence

OPS_HELP = ("load user-defined ops from this Python file (repeatable; GRADIR_OPS=a.py:b.py too; "
            "see docs/extending.md)")

__all__ = ["add_command", "add_ops_option", "load_user_ops"]


def add_command(sub: argparse._SubParsersAction, name: str, *, help: str, description: str,
                examples: Sequence[str]) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` shows a description and examples (``$ gradir ...`` lines)."""
    import textwrap
    # paragraphs written as one line are wrapped; ones with line breaks are laid out already
    text = "\n\n".join(p if "\n" in p else textwrap.fill(p, 96) for p in description.split("\n\n"))
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=help, description=text, epilog=epilog, allow_abbrev=False,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def add_ops_option(parser: argparse.ArgumentParser) -> None:
    """``--ops FILE`` (repeatable): every subcommand takes it, so that a user's ops work everywhere."""
    parser.add_argument("--ops", action="append", dest="ops_files", metavar="FILE", default=[], help=OPS_HELP)


def load_user_ops(files: Sequence[str]) -> None:
    """Load the op files of ``GRADIR_OPS`` then those of ``--ops``, before a subcommand runs; a file that
    does not load raises ``OpDefinitionError`` (exit 1)."""
    from ..ops.userops import load_env_ops, load_ops
    load_env_ops()
    for path in files:
        load_ops(path)
