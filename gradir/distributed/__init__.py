"""Data-parallel runs: placement analysis (``placement``, ``rules``), the shard graph (``shardgraph``),
and running K shards inline or on Dask (``run``, ``worker``, the engine opened by ``scheduler``);
docs/distributed.md."""

from . import rules_norm  # noqa: F401  (registers the normalization ops' rules)
from .analysis import analyze
from .placement import PARTIAL, REPLICATED, Placement, split
from .run import Sharded, shard

__all__ = ["shard", "Sharded", "Placement", "REPLICATED", "PARTIAL", "split", "analyze"]
