"""ONNX in and out: ``import_onnx`` (ONNX models and the training graphs ONNX Runtime builds, to gradir
graphs) and ``export_onnx`` (gradir graphs to ONNX models ONNX Runtime's training build runs).

The ``onnx`` package is an optional dependency (``pip install "gradir[onnx]"``); without it both
functions raise a ``GradirError`` that says how to install it.  docs/onnx.md is the user's guide.
"""

from __future__ import annotations

from .common import ImportedModel, require_onnx
from .exporter import export_onnx
from .importer import import_onnx
# the hand handlers of op families, registered into import_ops.HANDLERS / export_ops.EXPORTERS (imported
# here, not at the end of import_ops/export_ops: that is an import cycle, which tests/test_layout.py refuses)
from . import export_dropout, import_dropout  # noqa: E402,F401
from . import export_elem, import_elem  # noqa: E402,F401

__all__ = ["import_onnx", "export_onnx", "ImportedModel", "require_onnx"]
