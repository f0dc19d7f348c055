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

``load(name)`` returns the compiled module ``gradir.backends.cpu.kernels._jit_<name>``, or
``None`` when the switch is off or numba is missing; the NumPy path is then taken.

numba's on-disk cache is keyed on the file a kernel is defined in, but the kernels
inline code from the building blocks ``_jit_core.py``, ``_jit_gemm.py``, ``_jit_goto.py`` (and ``_jit_lstm.py``'s
``tanh``, which ``_jit_gru`` inlines, and ``_jit_im2col.py``'s columns, which ``_jit_conv`` inlines): ``load``
therefore keeps a stamp of those files' SHA-256 beside each module's cache and empties the
module's cache index when the stamp differs, so an edited building block never runs stale
machine code.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import threading
from pathlib import Path
from types import ModuleType

import numpy as np

__all__ = ["available", "enabled", "set_enabled", "disabled", "load", "readable", "writable_out"]

_on = os.environ.get("GRADIR_JIT", "1").strip().lower() not in ("0", "off", "false", "no")
_off = 0  # how many ``disabled()`` blocks are open (in any thread)
_lock = threading.Lock()
_modules: dict[str, ModuleType | None] = {}
_missing: str | None = None  # why numba could not be used, once known


def available() -> bool:
    """True when numba can be imported (whatever the switch says)."""
    return load_core() is not None


def enabled() -> bool:
    """True when kernels take their compiled path."""
    return _on and not _off and available()


def set_enabled(flag: bool) -> None:
    """Switch the compiled kernels on or off (``disabled()`` blocks still win while open)."""
    global _on
    _on = bool(flag)


class disabled:
    """``with jit.disabled():`` run the NumPy kernels (process-wide while any such block is
    open; blocks may nest and overlap across threads)."""

    def __enter__(self) -> None:
        global _off
        with _lock:
            _off += 1

    def __exit__(self, *exc: object) -> None:
        global _off
        with _lock:
            _off -= 1


def _import(name: str) -> ModuleType | None:
    global _missing
    with _lock:
        if name not in _modules:
            try:
                mod = importlib.import_module(f"gradir.backends.cpu.kernels._jit_{name}")
                if name not in ("core", "gemm"):
                    _check_core_stamp(mod)
                eager = getattr(mod, "compile_eager", None)
                if eager is not None:  # after the stamp check, which may empty the cache
                    eager()
                _modules[name] = mod
            except Exception as exc:  # numba/llvmlite missing or broken, no writable cache, ...
                _modules[name] = None
                _missing = f"{type(exc).__name__}: {exc}"
        return _modules[name]


# building blocks the kernel modules inline (_jit_lstm's tanh is _jit_gru's too, _jit_im2col's columns _jit_conv's)
_BLOCKS = ("_jit_core.py", "_jit_gemm.py", "_jit_goto.py", "_jit_lstm.py", "_jit_im2col.py")


def core_digest() -> str:
    """SHA-256 of the building blocks (``_jit_core.py``, ``_jit_gemm.py``, ``_jit_goto.py``) the
    compiled kernels inline."""
    sha = hashlib.sha256()
    for name in _BLOCKS:
        sha.update(Path(__file__).with_name(name).read_bytes())
    return sha.hexdigest()


def _check_core_stamp(mod: ModuleType) -> None:
    """Empty the on-disk cache index of ``mod``'s kernels when a building block changed
    since they were cached (numba itself only checks ``mod``'s own file)."""
    short = mod.__name__.rsplit(".", 1)[-1]
    by_dir: dict[str, list] = {}
    for obj in vars(mod).values():
        cache = getattr(obj, "_cache", None)
        py_func = getattr(obj, "py_func", None)
        if py_func is None or py_func.__module__ != mod.__name__ or not hasattr(cache, "_cache_path"):
            continue
        by_dir.setdefault(cache._cache_path, []).append(cache)
    digest = core_digest()
    for cache_dir, caches in by_dir.items():
        stamp = Path(cache_dir) / f"{short}.core-sha256"
        try:
            if stamp.exists() and stamp.read_text().strip() == digest:
                continue
            for cache in caches:
                cache.flush()
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(digest + "\n")
        except OSError:  # an unwritable cache directory: numba does not cache there either
            pass


def load_core() -> ModuleType | None:
    return _import("core")


def load(name: str) -> ModuleType | None:
    """The compiled-kernel module ``_jit_<name>``, or ``None`` (switched off, or no numba)."""
    if not _on or _off:
        return None
    mod = _modules.get(name)
    if mod is not None:
        return mod
    return _import(name)


class _Alias:
    """Holds a read-only array and exposes its memory as a writeable array interface."""

    def __init__(self, a: np.ndarray) -> None:
        self.base = a
        iface = dict(a.__array_interface__)
        iface["data"] = (iface["data"][0], False)
        self.__array_interface__ = iface


def readable(a: np.ndarray) -> np.ndarray:
    """``a`` as an operand of a compiled kernel.

    numba types a read-only array differently from a writeable one, so a read-only input
    (``np.broadcast_to``, ``np.frombuffer``, a read-only memory map) would make numba
    compile a second variant of the kernel in the middle of a run.  Compiled kernels never
    write their operands, so a read-only array is passed as a writeable alias of the same
    memory instead (no copy).
    """
    if a.flags.writeable:
        return a
    return np.asarray(_Alias(a))


def writable_out(out: np.ndarray, op: str | None = None) -> np.ndarray:
    """``out``, or a clear ``ValueError`` when it is read-only (as NumPy's ``out=`` does)."""
    if not out.flags.writeable:
        raise ValueError(f"{op + ': ' if op else ''}output array is read-only")
    return out


def why_unavailable() -> str | None:
    """Why numba could not be loaded, if it could not."""
    load_core()
    return _missing
