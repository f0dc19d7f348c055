"""Source code for a fused element-wise loop, written from the ops' scalar ``FORMULA`` (the one
definition of each op's arithmetic, in the language of ``gradir.ir.formula``), compiled by numba and
cached on disk.

Numerics: every value is computed in the group's dtype (constants and attributes are rounded to
the dtype first, as NumPy does with a Python float beside a float32 array).  Float64 loops use
no fast-math flags at all, as the Float64 kernels (NumPy) round every operation.  Float32 loops
contract a multiply and an add into an FMA *within* an op's formula, as the compiled Float32
kernels do, and never across ops (``_jit_fused.keep``), so each op is rounded as its kernel
rounds it.  Each op's operands are fenced too, each with its own opaque zero (``z * (2m + 1)``): else
LLVM merges equal subexpressions of two ops (``Y * Y`` of ``TanhGrad`` and ``dY * Y`` of
``SigmoidGrad(Y, Y)``), and a product with two uses is no longer contracted into the FMA the op's
kernel computes; an op whose compiled Float32 kernel has an element function (``KernelInfo.scalar``)
calls it.  Signed zeros and NaN are kept.

Caching: a group's source is a pure function of its canonical key (ops, wiring, attributes,
dtype, which operands broadcast along the innermost axis), written once to
``<cache dir>/fused/f_<sha>.py`` and compiled by numba with ``cache=True``, so numba keeps the
machine code beside it and a later process only loads it.  Identical groups share one module.
The cache directory is ``$GRADIR_CACHE_DIR``, else ``$XDG_CACHE_HOME/gradir``, else
``~/.cache/gradir``; when it cannot be written, a private temporary directory is used (correct,
but every process compiles again).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from ....ir import formula as formula_lang

__all__ = ["TRANSCENDENTAL", "formula_of", "scalar_function", "kernel_source", "compiled_loop", "cache_dir",
           "compile_count", "CODEGEN_VERSION"]

CODEGEN_VERSION = 4

# The formula functions numba compiles to one libm call per element (``gradir.ir.formula``): such loops
# do not vectorize and run several times slower than NumPy's SIMD kernels (and round differently),
# so the pass keeps ops that use them out of fused groups (unless their kernel is such a loop).
TRANSCENDENTAL = frozenset(name for name, f in formula_lang.FUNCTIONS.items() if f.transcendental)


def formula_of(cls: type, n_operands: int) -> Optional[str]:
    """``cls``'s scalar formula; a variadic sum (``Sum``) is ``((X0 + X1) + X2) + ...``, the order its
    kernel adds in.  ``None`` when the op has none."""
    if cls.FORMULA is not None:
        return cls.FORMULA
    from ....ops.math import SumOp
    if cls is SumOp:
        return " + ".join(f"X{k}" for k in range(n_operands))
    return None


def kernel_source(body: Any, vector: tuple[bool, ...]) -> str:
    """The numba module for ``body`` (``gradir.ops.fused.FusedBody``); ``vector[k]`` says whether
    operand ``k`` varies along the innermost axis (else it is one value per row)."""
    dtype = np.dtype(body.dtype)
    tname = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}[dtype]
    consts: dict[str, str] = {}
    fenced = dtype == np.float32  # see _jit_fused: contraction inside an op only, as in its Float32 kernel
    imports: set[str] = set()

    def const(v: float) -> str:
        key = float(v).hex()
        if key not in consts:
            consts[key] = f"K{len(consts)}"
        return consts[key]

    n_in = body.n_inputs
    outs = [f"o{k}" for k in range(len(body.outputs))]
    ins = [f"i{k}" for k in range(n_in)]
    lines = []
    fences = []  # one opaque zero per (op, operand): no subexpression is shared between two ops
    for i, (cls, args, attrs) in enumerate(body.instrs):
        slot = n_in + i
        if fenced:
            given = []
            for a in args:
                m = len(fences)
                fences.append(f"        z{m} = z * {2 * m + 1}")
                lines.append(f"f{m} = keep(v{a}, z{m})")
                given.append(f"f{m}")
            args_text = given
        else:
            args_text = [f"v{a}" for a in args]
        scalar = scalar_function(cls, dtype)
        if scalar is not None:  # the compiled Float32 kernel's own element function: its bits
            imports.add(scalar)
            expr = f"{scalar}({', '.join(args_text)})"
        else:
            text = formula_of(cls, len(args))
            if text is None:
                raise ValueError(f"{cls.op_name} has no formula")
            names = ([f"X{k}" for k in range(len(args))] if cls.FORMULA is None
                     else [o.name for o in cls.OPERANDS][:len(args)])
            expr = formula_lang.scalar_source(text, dict(zip(names, args_text)), attrs, const)
        lines.append(f"v{slot} = keep({expr}, z)" if fenced else f"v{slot} = {expr}")
    fastmath = ", fastmath={'contract'}" if fenced else ""
    if body.sums:
        return _sums_source(body, vector, tname, lines, fences, _header(tname, consts, imports), fastmath)
    sig_arrays = ", ".join([f"{tname}[::1]"] * (n_in + len(outs)))
    head = _header(tname, consts, imports) + [
        f"@njit('void(int64, int64, int64, int64, int64, int64[::1], int64[:, ::1], int64, {sig_arrays})',",
        f"      nogil=True, cache=True, error_model='numpy', boundscheck=False{fastmath})",
        f"def loop(u0, u1, nch, ch, cols, oshape, ostr, z, {', '.join(ins + outs)}):",
        "    nd = oshape.size",
        "    for u in range(u0, u1):",
        "        r = u // nch",
        "        c0 = (u - r * nch) * ch",
        "        c1 = min(cols, c0 + ch)",
        "        n = c1 - c0",
        *fences,
    ]
    return "\n".join(head + _row(" " * 8, n_in, outs, vector, lines, body.outputs)) + "\n"


def _row(ind: str, n_in: int, outs: list[str], vector: tuple[bool, ...], lines: list[str],
         outputs: tuple[int, ...], tail: tuple[str, ...] = ()) -> list[str]:
    """The code of one row ``r`` of a loop, columns ``c0:c1``, indented by ``ind``: each operand's
    offset from the row's index, then the element loop (``lines``, then the writes, then ``tail``)."""
    code = [
        *(f"{ind}b{k} = 0" for k in range(n_in)),
        f"{ind}rem = r",
        f"{ind}for d in range(nd - 1, -1, -1):",
        f"{ind}    q = rem // oshape[d]",
        f"{ind}    e = rem - q * oshape[d]",
        f"{ind}    rem = q",
        *(f"{ind}    b{k} += e * ostr[{k}, d]" for k in range(n_in)),
        *(f"{ind}w{k} = {o}[r * cols + c0:r * cols + c1]" for k, o in enumerate(outs)),
        *(f"{ind}a{k} = i{k}[b{k} + c0:b{k} + c0 + n]" if vector[k] else f"{ind}s{k} = i{k}[b{k}]"
          for k in range(n_in)),
        f"{ind}for j in range(n):",
        *(f"{ind}    v{k} = a{k}[j]" if vector[k] else f"{ind}    v{k} = s{k}" for k in range(n_in)),
        *(f"{ind}    {line}" for line in lines),
        *(f"{ind}    w{k}[j] = v{s}" for k, s in enumerate(outputs)),
        *(f"{ind}    {line}" for line in tail)]
    return code


def _header(tname: str, consts: dict[str, str], imports: set[str]) -> list[str]:
    return [
        "# generated by gradir.backends.cpu.kernels.fused_codegen (do not edit): one fused element-wise loop",
        f"# codegen version {CODEGEN_VERSION}",
        "import math", "import numpy as np", "from numba import njit",
        "from gradir.backends.cpu.kernels._jit_fused import keep",
        *([f"from gradir.backends.cpu.kernels._jit_act import {', '.join(sorted(imports))}  # blocks "
           f"{_blocks_digest()}"]
          if imports else []), "",
        *(f"{name} = np.{tname}(float.fromhex({key!r}))" for key, name in consts.items()), ""]


def _sums_source(body: Any, vector: tuple[bool, ...], tname: str, lines: list[str], fences: list[str],
                 header: list[str], fastmath: str) -> str:
    """The loop of a group that ends in sums over its leading axes (``body.sums``).  A unit of work
    is a strip of columns (of the innermost axis) over every row: each column's sum adds its rows
    one after another, from 0, in the dtype, as NumPy's ``sum`` over leading axes does (the bits of
    the unfused ``ReduceSumTo``), and no two units write the same sum."""
    n_in = body.n_inputs
    outs = [f"o{k}" for k in range(len(body.outputs))]
    sums = [f"q{k}" for k in range(len(body.sums))]
    ins = [f"i{k}" for k in range(n_in)]
    sig_arrays = ", ".join([f"{tname}[::1]"] * (n_in + len(outs) + len(sums)))
    code = header + [
        f"@njit('void(int64, int64, int64, int64, int64, int64[::1], int64[:, ::1], int64, {sig_arrays})',",
        f"      nogil=True, cache=True, error_model='numpy', boundscheck=False{fastmath})",
        f"def loop(u0, u1, ch, cols, rows, oshape, ostr, z, {', '.join(ins + outs + sums)}):",
        "    nd = oshape.size",
        "    for u in range(u0, u1):",
        "        c0 = u * ch",
        "        c1 = min(cols, c0 + ch)",
        "        n = c1 - c0",
        *fences,
        *(f"        p{k} = {q}[c0:c1]" for k, q in enumerate(sums)),
        *(f"        p{k}[:] = 0" for k in range(len(sums))),
        "        for r in range(rows):",
        *_row(" " * 12, n_in, outs, vector, lines, body.outputs,
              tuple(f"p{k}[j] = p{k}[j] + v{s}" for k, (s, _) in enumerate(body.sums)))]
    return "\n".join(code) + "\n"


def scalar_function(cls: type, dtype: Any) -> Optional[str]:
    """The ``_jit_act`` element function a Float32 loop calls for ``cls`` (``KernelInfo.scalar``):
    the compiled kernel's own arithmetic (clips, ``exp2`` polynomials), vectorizable, with its bits."""
    from .registry import KERNELS
    info = KERNELS.get(cls)
    return info.scalar if info is not None and np.dtype(dtype) == np.float32 else None


_digest: Optional[str] = None


def _blocks_digest() -> str:
    """SHA-256 of the numba code a loop inlines from gradir (numba's cache checks only the loop's
    own file: the digest in the source makes an edited building block a new file)."""
    global _digest
    if _digest is None:
        sha = hashlib.sha256()
        for name in ("_jit_act.py", "_jit_core.py", "_jit_fused.py"):
            sha.update(Path(__file__).with_name(name).read_bytes())
        _digest = sha.hexdigest()[:16]
    return _digest


def cache_dir() -> Path:
    """Where generated loops and numba's machine code for them live (see the module docstring)."""
    base = os.environ.get("GRADIR_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "gradir")
    return Path(base) / "fused"


_lock = threading.Lock()
_loops: dict[tuple, Callable[..., None]] = {}
_fallback_dir: Optional[Path] = None
_compiled = 0  # how many modules this process imported (each compiled, or loaded from numba's cache)


def compile_count() -> int:
    """How many distinct fused loops this process has built or loaded (for tests and benchmarks)."""
    return _compiled


def _write(path: Path, text: str) -> bool:
    try:
        if path.exists() and path.read_text() == text:
            return True
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)  # atomic: another process never reads half a file
        return True
    except OSError:
        return False


def compiled_loop(body: Any, vector: tuple[bool, ...]) -> Callable[..., None]:
    """The compiled loop for ``body`` and this broadcast pattern (built, loaded or memoized)."""
    global _fallback_dir, _compiled
    key = (body.key, vector)
    fn = _loops.get(key)
    if fn is not None:
        return fn
    with _lock:
        fn = _loops.get(key)
        if fn is not None:
            return fn
        text = kernel_source(body, vector)
        digest = hashlib.sha256(f"{CODEGEN_VERSION}\n{text}".encode()).hexdigest()[:24]
        path = cache_dir() / f"f_{digest}.py"
        if not _write(path, text):
            if _fallback_dir is None:
                _fallback_dir = Path(tempfile.mkdtemp(prefix="gradir-fused-"))
            path = _fallback_dir / f"f_{digest}.py"
            _write(path, text)
        spec = importlib.util.spec_from_file_location(f"gradir_fused_{digest}", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # numba's cache finds the module's globals by its name
        spec.loader.exec_module(mod)
        fn = mod.loop
        _loops[key] = fn
        _compiled += 1
        return fn
