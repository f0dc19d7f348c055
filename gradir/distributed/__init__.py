"""Data-parallel runs: placement analysis (``placement``, ``rules``), the shard graph (``shardgraph``),
and running K shards inline or on Dask (``run``, ``worker``, the engine opened by ``scheduler``);
docs/distributed.md.

The placement rules of an op family may live in a module ``rules_<family>.py`` here (beside ``rules.py``,
whose ``@rule`` they use): every such module is imported with the package, so it needs no list entry."""

import importlib as _importlib
import pkgutil as _pkgutil

from .analysis import analyze
from .placement import PARTIAL, REPLICATED, Placement, split
from .run import Sharded, shard

__all__ = ["shard", "Sharded", "Placement", "REPLICATED", "PARTIAL", "split", "analyze"]

for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    if _module.startswith("rules_"):
        _importlib.import_module(f"{__name__}.{_module}")
