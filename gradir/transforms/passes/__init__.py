"""Graph-to-graph passes, each a small named unit that can be listed and switched off.

A pass takes a validated ``Program`` (the graph plus its networkx lowering) and
rewrites it in place, returning a short description of what it changed.  The
default pipeline is ``DEFAULT_PASSES``; ``gradir plan --passes`` lists them and
``--disable NAME`` (or ``compile(..., disable=[...])``) switches one off.
"""

from __future__ import annotations

from . import basic, constfold, fusion, matmul, simplify  # noqa: F401  (register the passes)
from . import elementwise  # noqa: F401
from . import chunk  # noqa: F401  (after the passes it follows)
