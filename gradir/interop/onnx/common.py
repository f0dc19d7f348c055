"""What import and export share: the ``onnx`` module (optional), dtype maps, the import result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import Diagnostic, OnnxError
from ...ir.graph import Graph
from ...ir.types import DType

__all__ = ["require_onnx", "ImportedModel", "ONNX_TO_DTYPE", "DTYPE_TO_ONNX", "MS_DOMAIN", "GRADIR_DOMAIN",
           "ONNX_DOMAINS", "onnx_domain"]

MS_DOMAIN = "com.microsoft"
GRADIR_DOMAIN = "ai.gradir"
ONNX_DOMAINS = ("", "ai.onnx")

# TensorProto.DataType numbers (fixed by the ONNX spec)
ONNX_TO_DTYPE = {1: DType.Float32, 11: DType.Float64, 6: DType.Int32, 7: DType.Int64, 9: DType.Bool}
DTYPE_TO_ONNX = {d: k for k, d in ONNX_TO_DTYPE.items()}


def require_onnx() -> Any:
    """The ``onnx`` module, or an ``OnnxError`` that says how to install it."""
    try:
        import onnx
    except ImportError:
        raise OnnxError(Diagnostic('ONNX support needs the onnx package: pip install "gradir[onnx]"',
                                   filename="gradir")) from None
    from .ort_schemas import register
    register(onnx)  # ORT's training ops in the ai.onnx domain (SparseSoftmaxCrossEntropy), for onnx.checker
    return onnx


@dataclass
class ImportedModel:
    """What ``import_onnx`` returns: the graph (inputs and outputs labelled with their ONNX names) and
    the values of the initializers that became labelled inputs (``inputs``, keyed by label: give them to
    ``Executable.run`` with the model's own inputs, or write them with ``save_inputs``)."""

    graph: Graph
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the import did that a person may want to know

    @property
    def text(self) -> str:
        return self.graph.to_text()


def onnx_domain(d: str) -> str:
    """A node's domain with ONNX's two spellings of the default one (``""`` and ``"ai.onnx"``) made one."""
    return "" if d in ("", "ai.onnx") else d
