"""How ONNX ``Dropout`` and ORT's ``DropoutGrad`` become gradir ops: their ``ratio`` and ``training_mode``
inputs are folded into attributes (a value not known at import is refused, naming the input).

An ONNX Dropout with a ``seed`` takes ``generator="ort"``: gradir draws ONNX Runtime's mask (its first
run of a session).  Without a seed ONNX draws anew each run, and no one mask is the model's: gradir
draws its own (Philox, seed 0), unless the import was given ``dropout_seed=S`` (``--dropout-seed``):
after ``onnxruntime.set_seed(S)`` ORT's k-th seedless Dropout to run draws with seed ``S + k``, so the
k-th training-mode one in node order gets ``generator="ort", seed=S+k``.  To reproduce any other run,
pass its mask as the Dropout's ``mask`` operand.  Opsets 7 to 11 have no training mode: the Dropout is
the identity (``ratio`` an attribute).
"""

from __future__ import annotations

from typing import Any, Optional

from .common import MS_DOMAIN
from .import_ops import Unsupported, handler

__all__: list[str] = []


def _input(ctx: Any, node: Any, i: int, what: str) -> Optional[float]:
    """Input ``i`` (a scalar known at import), or ``None`` when it is omitted."""
    if i >= len(node.input) or not node.input[i]:
        return None
    a = ctx.const(node, i, what)
    if a.size != 1:
        raise Unsupported(f"its {what} (input {i}) has {a.size} values; it must be one")
    return a.reshape(-1)[0].item()


def _ratio(ctx: Any, node: Any, i: int) -> float:
    r = _input(ctx, node, i, "ratio")
    r = 0.5 if r is None else float(r)
    if not 0.0 <= r < 1.0:
        raise Unsupported(f"its ratio {r} is not in [0, 1)")
    return r


@handler("Dropout")
def _dropout(ctx: Any, node: Any, attrs: dict) -> list:
    extra = sorted(set(attrs) - {"seed", "ratio", "is_test"})
    if extra:
        raise Unsupported(f"attribute {', '.join(extra)} is not supported")
    x = ctx.x(node, 0)
    if ctx.opset < 12:  # inference only: the identity, whatever the ratio
        kw = dict(ratio=float(attrs.get("ratio", 0.5)), training_mode=False)
    else:
        kw = dict(ratio=_ratio(ctx, node, 1), training_mode=bool(_input(ctx, node, 2, "training_mode") or False))
        if "seed" in attrs:
            kw.update(seed=int(attrs["seed"]), generator="ort")
        elif getattr(ctx, "dropout_seed", None) is not None and kw["training_mode"] and kw["ratio"] > 0:
            k = ctx.dropouts_seeded = getattr(ctx, "dropouts_seeded", -1) + 1
            kw.update(seed=ctx.dropout_seed + k, generator="ort")
    y, mask = ctx.b.Dropout(x, **kw)
    return [y, mask][:len(node.output)]


@handler("DropoutGrad", domain=MS_DOMAIN)
def _dropout_grad(ctx: Any, node: Any, attrs: dict) -> list:
    # ORT's builder copies the forward Dropout's seed onto DropoutGrad; its kernel reads the mask, not a seed
    attrs = {k: v for k, v in attrs.items() if k != "seed"}
    if attrs:
        raise Unsupported(f"attribute {', '.join(sorted(attrs))} is not supported")
    return [ctx.b.DropoutGrad(ctx.x(node, 0), ctx.x(node, 1), ratio=_ratio(ctx, node, 2),
                              training_mode=bool(_input(ctx, node, 3, "training_mode") or False))]
