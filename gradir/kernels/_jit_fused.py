"""numba building blocks that the generated fused loops (``fused_codegen``) import.

``fence(v)`` is LLVM's ``llvm.arithmetic.fence``: ``v`` unchanged, but fast-math rewrites do not
cross it.  Float32 loops are compiled with FMA contraction on (as the compiled Float32 kernels
are, so an op's own formula contracts as its kernel's does, e.g. ``TanhGrad``'s ``1 - y*y``)
and every op's result goes through a fence, so no multiply of one op fuses with an add of
the next: each op is rounded as its own kernel rounds it.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["fence"]


@intrinsic
def fence(typingctx, v):  # type: ignore[no-untyped-def]
    """``v``, with no fast-math rewrite across it."""
    if not isinstance(v, types.Float):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ty = args[0].type
        name = f"llvm.arithmetic.fence.{'f32' if ty == ir.FloatType() else 'f64'}"
        fn = builder.module.globals.get(name)
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(ty, [ty]), name)
        return builder.call(fn, args)

    return v(v), codegen
