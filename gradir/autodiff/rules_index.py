"""The gradient rules of the indexing, joining and shape ops (``ops/index.py``, ``ops/concat.py``, ``Expand`` and
``Squeeze``), emitting ONNX Runtime's gradient ops where ORT has them: ``Gather`` -> ``GatherGrad``,
``GatherElements`` -> ``GatherElementsGrad``, ``Slice`` -> ``SliceGrad``, ``Concat`` -> ``Split``,
``ConcatTraining`` -> ``SplitTraining``, ``Split``/``SplitTraining`` -> ``Concat``.  Registered in
``RULES`` when ``gradir.autodiff`` is imported (its ``__init__``)."""

from __future__ import annotations

from ..ir.op import Op
from .gradrules import Emitter, rule

__all__: list[str] = []


@rule("Gather")
def _gather(e: Emitter, op: Op, cts: list, need: list) -> list:
    data, indices = op.operands
    return [e.GatherGrad(indices, cts[0], shape=e.static_shape(op, data), axis=op.attrs["axis"]), None]


@rule("GatherElements")
def _gather_elements(e: Emitter, op: Op, cts: list, need: list) -> list:
    data, indices = op.operands
    return [e.GatherElementsGrad(cts[0], indices, shape=e.static_shape(op, data), axis=op.attrs["axis"]), None]


@rule("Slice")
def _slice(e: Emitter, op: Op, cts: list, need: list) -> list:
    a = op.attrs
    return [e.SliceGrad(cts[0], shape=e.static_shape(op, op.operands[0]), starts=a["starts"], ends=a["ends"],
                        axes=a["axes"], steps=a["steps"])]


@rule("Trilu")
def _trilu(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [e.Trilu(cts[0], upper=op.attrs["upper"], k=op.attrs["k"])]


@rule("Split", "SplitTraining")
def _split(e: Emitter, op: Op, cts: list, need: list) -> list:
    parts = [ct if ct is not None else e.ZerosLike(r) for ct, r in zip(cts, op.results)]
    return [e.Concat(*parts, axis=op.attrs["axis"])]


def _sizes(e: Emitter, op: Op) -> list[int]:
    a = op.attrs["axis"]
    sizes = [e.shape(v)[a] for v in op.operands]
    if None in sizes:
        e.fail(op, f"cannot differentiate {op.op_name}: the sizes of its operands along axis {a} "
                   f"({', '.join('?' if s is None else str(s) for s in sizes)}) must be known to split its gradient")
    return sizes  # type: ignore[return-value]


@rule("Concat")
def _concat(e: Emitter, op: Op, cts: list, need: list) -> list:
    parts = e.Split(cts[0], split=_sizes(e, op), axis=op.attrs["axis"])
    return list(parts) if isinstance(parts, tuple) else [parts]


@rule("ConcatTraining")
def _concat_training(e: Emitter, op: Op, cts: list, need: list) -> list:
    ct = cts[0] if cts[0] is not None else e.ZerosLike(op.results[0])
    parts = e.SplitTraining(ct, split=_sizes(e, op), axis=op.attrs["axis"])
    return list(parts) if isinstance(parts, tuple) else [parts]


@rule("Expand")
def _expand(e: Emitter, op: Op, cts: list, need: list) -> list:
    return [cts[0]]  # the driver sums the cotangent back to X's shape (BROADCASTS)


@rule("Squeeze")
def _squeeze(e: Emitter, op: Op, cts: list, need: list) -> list:
    r = e.rank(op.operands[0])
    return [e.Unsqueeze(cts[0], axes=sorted(a % r for a in op.attrs["axes"]))]
