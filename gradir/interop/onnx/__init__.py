"""ONNX in and out: ``import_onnx`` (ONNX models and the training graphs ONNX Runtime builds, to gradir
graphs) and ``export_onnx`` (gradir graphs to ONNX models ONNX Runtime's training build runs).

The ``onnx`` package is an optional dependency (``pip install "gradir[onnx]"``); without it both
functions raise a ``GradirError`` that says how to install it.  docs/onnx.md is the user's guide.

The hand-written handlers of an op family may live in modules ``import_<family>.py`` and
``export_<family>.py`` here (using ``import_ops.handler`` and ``export_ops.exporter``): every such module is
imported with the package, so it needs no list entry (a line in ``import_ops.py`` would close an import
cycle, which tests/test_layout.py refuses).
"""

from __future__ import annotations

from .common import ImportedModel, require_onnx
from .exporter import export_onnx
from .importer import import_onnx
# the hand handlers of op families (import_<family>.py, export_<family>.py), registered into
# import_ops.HANDLERS / export_ops.EXPORTERS: every such module is imported here (at the end of
# import_ops/export_ops it would be an import cycle, which tests/test_layout.py refuses)
import importlib as _importlib  # noqa: E402
import pkgutil as _pkgutil  # noqa: E402

for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    if _module.split("_")[0] in ("import", "export") and _module not in ("import_ops", "export_ops"):
        _importlib.import_module(f"{__name__}.{_module}")

__all__ = ["import_onnx", "export_onnx", "ImportedModel", "require_onnx"]
