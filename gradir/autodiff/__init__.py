"""Reverse-mode differentiation: the driver, the gradient rules and GraphBuilder.

The hand-written gradient rules of an op family may live in a module ``rules_<family>.py`` here (beside
``gradrules.py``, whose ``@rule`` they use): every such module is imported with the package, so it needs
no list entry."""

import importlib as _importlib
import pkgutil as _pkgutil

for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    if _module.startswith("rules_"):
        _importlib.import_module(f"{__name__}.{_module}")
