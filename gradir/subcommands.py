"""How a module adds its subcommand to the ``gradir`` command line.

The modules behind the subcommands (``runcli``, ``autodiff``, ``gradcheck``, ``dot``) each have a
``register(sub)`` that calls :func:`add_command`; ``cli`` calls those.  ``add_command`` lives
here, apart from ``cli``, so that neither imports the other back.
"""

from __future__ import annotations

import argparse
from typing import Sequence

__all__ = ["add_command"]


def add_command(sub: argparse._SubParsersAction, name: str, *, help: str, description: str,
                examples: Sequence[str]) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` shows a description and examples (``$ gradir ...`` lines)."""
    import textwrap
    # paragraphs written as one line are wrapped; ones with line breaks are laid out already
    text = "\n\n".join(p if "\n" in p else textwrap.fill(p, 96) for p in description.split("\n\n"))
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=help, description=text, epilog=epilog, allow_abbrev=False,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
