"""The ``chunk-rows`` pass: regions of ops independent along their rows run in blocks of rows
(``gradir.transforms.memory.chunking``, ``Chunked``)."""

from __future__ import annotations

from ..memory import chunking
from .pipeline import Program, register_pass


@register_pass("chunk-rows",
               "run regions independent along their rows (a projection, log-softmax, loss and their backward) "
               "in blocks of rows, their large intermediates never whole")
def chunk_rows(p: Program) -> str:
    return chunking.chunk_rows(p)
