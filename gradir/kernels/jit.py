"""The switch for gradir's compiled kernels.

Element-wise and LSTM kernels have two implementations that compute the same
formulas: a portable NumPy one (many vectorized passes over cache-sized blocks) and a
compiled one (one fused loop per element, vectorized by LLVM through numba, and run
without the GIL, so the runtime's threads really run side by side).  The compiled
one is used when numba is importable and not switched off; it is built on first use
and cached on disk by numba, so later processes load it in milliseconds.

Switch it off with the environment variable ``GRADIR_JIT=0`` (read at import), or
from Python with :func:`set_enabled` / ``with jit.disabled(): ...`` (used by the
tests, which check both implementations against the same references).

``load(name)`` returns the compiled module ``gradir.kernels._jit_<name>``, or
``None`` when the switch is off or numba is missing; the NumPy path is then taken.
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType

__all__ = ["available", "enabled", "set_enabled", "disabled", "load"]

_on = os.environ.get("GRADIR_JIT", "1").strip().lower() not in ("0", "off", "false", "no")
_lock = threading.Lock()
_modules: dict[str, ModuleType | None] = {}
_missing: str | None = None  # why numba could not be used, once known


def available() -> bool:
    """True when numba can be imported (whatever the switch says)."""
    return load_core() is not None


def enabled() -> bool:
    """True when kernels take their compiled path."""
    return _on and available()


def set_enabled(flag: bool) -> None:
    global _on
    _on = bool(flag)


class disabled:
    """``with jit.disabled():`` run the NumPy kernels (process-wide while inside)."""

    def __enter__(self) -> None:
        self.saved = _on
        set_enabled(False)

    def __exit__(self, *exc: object) -> None:
        set_enabled(self.saved)


def _import(name: str) -> ModuleType | None:
    global _missing
    with _lock:
        if name not in _modules:
            try:
                _modules[name] = importlib.import_module(f"gradir.kernels._jit_{name}")
            except Exception as exc:  # numba/llvmlite missing or broken, no writable cache, ...
                _modules[name] = None
                _missing = f"{type(exc).__name__}: {exc}"
        return _modules[name]


def load_core() -> ModuleType | None:
    return _import("core")


def load(name: str) -> ModuleType | None:
    """The compiled-kernel module ``_jit_<name>``, or ``None`` (switched off, or no numba)."""
    if not _on:
        return None
    mod = _modules.get(name)
    if mod is not None:
        return mod
    return _import(name)


def why_unavailable() -> str | None:
    """Why numba could not be loaded, if it could not."""
    load_core()
    return _missing
