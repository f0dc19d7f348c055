"""Building blocks for the compiled kernels (imported only through ``gradir.backends.cpu.kernels.jit``).

Everything here is numba code that LLVM vectorizes: no calls to libm inside hot loops
(numba's ``math.exp`` is a scalar call, ~5x slower than NumPy's SIMD ``exp``), so the
few transcendentals the kernels need are written out as polynomials on the float's
bits, and float<->int bit casts are LLVM ``bitcast`` intrinsics.

Conventions for kernels built on this module:

* ``@njit(**ELEMENTWISE)``: no fast-math except signed zeros and fused multiply-adds
  (which halve the latency of the polynomials), so every result is IEEE arithmetic in
  a fixed order (and identical whichever elements a thread gets: threads get whole
  blocks, so an element's position in the vector loop never changes);
  ``error_model="numpy"`` so a division by zero gives inf/NaN like NumPy instead of
  raising (which would also block vectorization); ``nogil`` so the runtime's threads
  run kernels in parallel; ``cache`` so the machine code is compiled once per machine.
* ``@njit(**REDUCTION)`` adds ``reassoc`` so sums vectorize; a kernel then reduces
  each row in one fixed order, so results still do not depend on the thread count.
* Load every operand element into a local before computing: an early ``if`` around a
  load keeps LLVM from vectorizing when ``out`` aliases an operand (in place).
* numba's on-disk cache checks only the file a kernel is defined in, not the files whose
  code it inlines: ``jit.load`` stamps each kernel module's cache with this file's SHA-256
  and empties that cache when this file changes.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.errors import NumbaIRAssumptionWarning
from numba.extending import intrinsic

# numba's own "internal pedantic check" on the SSA form fires, harmlessly, when it inlines
# our scalar functions (with their selects) many times into one loop: keep it off users' stderr
# (numba attributes it to numba.core.ssa, or to the path of the kernel file whose call site
# it compiles: warn_explicit then takes the file name without ".py" as the module)
SSA_WARNING_MODULES = r".*(numba[./\\]core[./\\]ssa|gradir[./\\](backends[./\\]cpu[./\\])?kernels[./\\]_jit_\w+)$"
warnings.filterwarnings("ignore", category=NumbaIRAssumptionWarning, module=SSA_WARNING_MODULES)

__all__ = ["SSA_WARNING_MODULES",
           "ELEMENTWISE", "REDUCTION", "INLINE", "prefetch", "prefetch_span", "stream32", "store_fence", "vector_copy",
           "f32_as_i32", "i32_as_f32", "exp2_32", "clamp32", "apart", "LOG2E"]

_COMMON = dict(cache=True, error_model="numpy", boundscheck=False)
ELEMENTWISE = dict(nogil=True, fastmath={"nsz", "contract"}, **_COMMON)
REDUCTION = dict(nogil=True, fastmath={"nsz", "contract", "reassoc"}, **_COMMON)
INLINE = dict(inline="always", fastmath={"nsz", "contract"}, **_COMMON)

LOG2E = 1.0 / math.log(2.0)


@intrinsic
def prefetch(typingctx, arr, off):  # type: ignore[no-untyped-def]
    """Asks for the cache line of ``arr``'s element ``off`` (counted from its data pointer,
    whatever its strides) to be loaded, without waiting for it (``prefetcht0``)."""
    if not isinstance(arr, types.Array) or not isinstance(off, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        data = cgutils.create_struct_proxy(signature.args[0])(context, builder, value=args[0]).data
        ptr = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, types.intp), codegen


@njit(**INLINE)
def prefetch_span(arr, off, n):  # type: ignore[no-untyped-def]
    """``prefetch`` for the ``n`` elements of ``arr`` from ``off`` (one per 64-byte line)."""
    step = max(1, 64 // arr.itemsize)
    for i in range(0, n, step):
        prefetch(arr, off + i)


def vector_copy(lanes32: int, lanes64: int, nontemporal: bool):  # type: ignore[no-untyped-def]
    """An intrinsic ``copy(dst, d_off, src, s_off)``: ``dst[d_off:] = src[s_off:]`` for ``lanes32``
    float32 or ``lanes64`` float64 values (offsets in elements from the arrays' data pointers,
    whatever their strides) as one vector load and store; unaligned, or with ``nontemporal`` a
    non-temporal store (the line goes to memory without being read first and without taking a
    place in the caches; ``dst`` must then be aligned to the vector there, and the stores are
    weakly ordered: ``store_fence`` before other threads read them)."""
    def typer(typingctx, dst, d_off, src, s_off):  # type: ignore[no-untyped-def]
        if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.dtype == src.dtype
                and dst.dtype in (types.float32, types.float64)):
            return None
        sig = types.void(dst, types.intp, src, types.intp)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            d_arr, d_off, s_arr, s_off = args
            f32 = signature.args[0].dtype == types.float32
            lanes = lanes32 if f32 else lanes64
            vec = ir.VectorType(ir.FloatType() if f32 else ir.DoubleType(), lanes)
            al = 4 if f32 else 8
            d_data = cgutils.create_struct_proxy(signature.args[0])(context, builder, value=d_arr).data
            s_data = cgutils.create_struct_proxy(signature.args[2])(context, builder, value=s_arr).data
            v = builder.load(builder.bitcast(builder.gep(s_data, [s_off]), vec.as_pointer()), align=al)
            st = builder.store(v, builder.bitcast(builder.gep(d_data, [d_off]), vec.as_pointer()),
                               align=lanes * al if nontemporal else al)
            if nontemporal:
                st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
            return context.get_dummy_value()

        return sig, codegen

    typer.__name__ = f"copy_{lanes32}_{lanes64}{'_nt' if nontemporal else ''}"
    return intrinsic(typer)


# 32 bytes, streamed past the caches (``dst`` 32-byte aligned there)
stream32 = vector_copy(8, 4, nontemporal=True)


@intrinsic
def store_fence(typingctx):  # type: ignore[no-untyped-def]
    """A full memory fence (``mfence`` on x86): every store before it, non-temporal ones included,
    is visible to other threads before any memory access after it."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def i32_as_f32(typingctx, v):  # type: ignore[no-untyped-def]
    """The float32 whose bits are the int32 ``v``."""
    if not isinstance(v, types.Integer) or v.bitwidth != 32:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(v), codegen


@intrinsic
def f32_as_i32(typingctx, v):  # type: ignore[no-untyped-def]
    """The int32 whose bits are the float32 ``v``."""
    if v != types.float32:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(v), codegen


@intrinsic
def pow2_32(typingctx, n):  # type: ignore[no-untyped-def]
    """``2**n`` for a float32 holding an integer in [-127, 127] (0.0 for -127), built from
    its exponent bits in 32-bit integer arithmetic (numba would widen int32 maths to int64,
    which does not vectorize well).  NaN gives 1.0 (LLVM's ``fptosi`` of NaN is poison, so
    NaN is replaced by 0 first; callers keep NaN through the other factor)."""
    if n != types.float32:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i32 = ir.IntType(32)
        f32 = ir.FloatType()
        nan = builder.fcmp_unordered("uno", args[0], args[0])
        x = builder.select(nan, ir.Constant(f32, 0.0), args[0])
        k = builder.fptosi(x, i32)
        k = builder.add(k, ir.Constant(i32, 127))
        k = builder.shl(k, ir.Constant(i32, 23))
        return builder.bitcast(k, ir.FloatType())

    return types.float32(n), codegen


# 2^f on [-1/2, 1/2]: Taylor coefficients (ln 2)^k / k!, k = 7..0.  The truncation error
# is 5e-9 relative (below half an ulp of float32); measured error after float32 Horner
# rounding: at most 1.1 ulp over [-126, 127] (tests/test_kernels_jit.py checks < 1.25 ulp).
_E7 = np.float32(1.5252733804059840e-5)
_E6 = np.float32(1.5403530393381606e-4)
_E5 = np.float32(1.3333558146428443e-3)
_E4 = np.float32(9.6181291076284772e-3)
_E3 = np.float32(5.5504108664821580e-2)
_E2 = np.float32(2.4022650695910071e-1)
_E1 = np.float32(6.9314718055994531e-1)
_ONE = np.float32(1.0)
_HALF = np.float32(0.5)
_TMIN = np.float32(-127.0)
_TMAX = np.float32(127.0)


@njit(**INLINE)
def exp2_32(t):  # type: ignore[no-untyped-def]
    """``2**t`` for a float32 ``t``, vectorizable.

    ``t`` is clamped to [-127, 127]: the result is 0 for t < -126.5, denormal only for
    t in [-126.5, -126), and finite (at most 2^127.5) even for t > 127 or t = +inf, where
    the true value overflows.  The kernels either clamp their arguments inside that range
    (``|t| <= 80·log2(e) ≈ 115``) or only need the result to be huge or ~0 there (tanh,
    exp of a log-softmax output <= 0).  NaN in gives NaN out.
    """
    t = _TMIN if t < _TMIN else t  # these forms keep NaN (min/max would drop it)
    t = _TMAX if t > _TMAX else t
    fl = np.floor(t + _HALF)
    f = t - fl
    p = _E7 * f + _E6
    p = p * f + _E5
    p = p * f + _E4
    p = p * f + _E3
    p = p * f + _E2
    p = p * f + _E1
    p = p * f + _ONE
    return p * pow2_32(fl)


@njit(**INLINE)
def apart(o, a):  # type: ignore[no-untyped-def]
    """True when the memory of ``o`` and ``a`` does not overlap (a kernel writing ``o`` from ``a`` may then run
    the plain loop, which LLVM vectorizes; in place it computes through a private buffer)."""
    po = o.ctypes.data
    pa = a.ctypes.data
    return po + o.nbytes <= pa or pa + a.nbytes <= po


@njit(**INLINE)
def clamp32(t, lo, hi):  # type: ignore[no-untyped-def]
    """``t`` clipped to ``[lo, hi]``, NaN kept (like ``np.clip``), vectorizable."""
    t = lo if t < lo else t
    return hi if t > hi else t
