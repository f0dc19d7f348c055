"""ONNX in and out: ``import_onnx`` (ONNX models and the training graphs ONNX Runtime builds, to gradir
graphs) and ``export_onnx`` (gradir graphs to ONNX models ONNX Runtime's training build runs).

The ``onnx`` package is an optional dependency (``pip install "gradir[onnx]"``); without it both
functions raise a ``GradirError`` that says how to install it.  docs/onnx.md is the user's guide.
"""

from __future__ import annotations

from .common import ImportedModel, require_onnx
from .exporter import export_onnx
from .importer import import_onnx
from . import export_elem, import_elem  # noqa: F401  (register the elem family's hand handlers)

__all__ = ["import_onnx", "export_onnx", "ImportedModel", "require_onnx"]
