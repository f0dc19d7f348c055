"""Data-parallel runs: placement analysis (``placement``, ``rules``), the shard graph (``shardgraph``),
and running K shards inline or on Dask (``run``, ``worker``, the engine opened by ``scheduler``);
docs/distributed.md."""

from .analysis import analyze
from .placement import PARTIAL, REPLICATED, Placement, split
from .run import Sharded, shard
from . import rules_loss  # noqa: F401  (registers cross_entropy_rows)

__all__ = ["shard", "Sharded", "Placement", "REPLICATED", "PARTIAL", "split", "analyze"]
