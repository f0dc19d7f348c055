"""numba building blocks that the generated fused loops (``fused_codegen``) import.

Float32 loops are compiled with FMA contraction on, as the compiled Float32 kernels are, so an
op's own arithmetic contracts as its kernel's does (``TanhGrad``'s ``1 - y*y``, the polynomials
of the kernels' element functions).  A multiply of one op must not fuse with an add of the next
(the unfused ops round in between): every op's result goes through ``keep(v, z)``, ``v``'s bits
OR-ed with ``z``, a loop argument that is always 0.  LLVM cannot fold that away, so the add no
longer sees a multiply, and it vectorizes (``llvm.arithmetic.fence`` would do the same but
keeps the loop scalar).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["keep"]


@intrinsic
def keep(typingctx, v, z):  # type: ignore[no-untyped-def]
    """``v`` (a float) with its bits OR-ed with the integer ``z`` (0 at run time)."""
    if not isinstance(v, types.Float) or not isinstance(z, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        x, zero = args
        width = 32 if x.type == ir.FloatType() else 64
        it = ir.IntType(width)
        zero = builder.trunc(zero, it) if zero.type.width > width else (
            builder.zext(zero, it) if zero.type.width < width else zero)
        return builder.bitcast(builder.or_(builder.bitcast(x, it), zero), x.type)

    return v(v, z), codegen
