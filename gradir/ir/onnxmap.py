"""An op's ONNX counterpart as data: ``Op.ONNX = OnnxMap(...)``.

The ONNX exporter and importer (``gradir.interop.onnx``) derive their handlers from it, so an op whose ONNX
counterpart takes the same inputs and attributes needs no code in ``onnxio``: only this line on its class.
Hand-written handlers remain for what is not data (an opset switch, an attribute that becomes an input,
ORT's fused patterns, ...), registered by op class; they override the derived ones.

This module imports nothing from ``gradir.interop.onnx`` (nor the ``onnx`` package): op definitions use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

__all__ = ["OnnxMap", "ONNX_DOMAIN", "MS_DOMAIN", "GRADIR_DOMAIN", "onnx_map", "no_onnx", "is_user_op"]

ONNX_DOMAIN = ""  # ai.onnx
MS_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib and training ops
GRADIR_DOMAIN = "ai.gradir"  # gradir's own ops, for viewing and round trips (ONNX Runtime has no kernel for them)


@dataclass(frozen=True)
class OnnxMap:
    """How one gradir op is one ONNX node.

    * ``name``: the ONNX op type (``None``: the gradir op's own name).
    * ``domain``: ``""`` (ai.onnx), ``"com.microsoft"`` or ``"ai.gradir"``.
    * ``attrs``: the attributes written to and read from the node, ``{gradir name: ONNX name}`` (a tuple
      of names means the same names).  Attributes not listed are not exported, and an ONNX attribute not
      listed is refused on import.  An attribute ONNX leaves out on import takes the gradir default, so
      the two defaults must agree.
    * ``operands``: ``None`` (ONNX input k is operand k) or a permutation: ONNX input k is operand
      ``operands[k]``.
    * ``since``/``until``: the ai.onnx opsets the counterpart exists in (inclusive; ``None``: no bound).
    * ``ignored``: ONNX attributes accepted on import and not read, because the ONNX Runtime kernel of the
      node does not read them either (ORT's gradient builders copy the forward node's ``epsilon`` onto
      ``LayerNormalizationGrad``, whose kernel takes the saved ``inv_std_dev``); never exported.
    * ``ort_float32_only``: ONNX Runtime's CPU kernel of the node exists for Float32 only (1.19.2's training
      build, checked by running one-op exports of each in ORT): ``gradir export`` warns of it in Float64.
    """

    name: Optional[str] = None
    domain: str = ONNX_DOMAIN
    attrs: Mapping[str, str] = field(default_factory=dict)
    operands: Optional[tuple[int, ...]] = None
    since: Optional[int] = None
    until: Optional[int] = None
    ort_float32_only: bool = False
    ignored: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.attrs, (tuple, list)):
            object.__setattr__(self, "attrs", {a: a for a in self.attrs})
        if not isinstance(self.attrs, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                           for k, v in self.attrs.items()):
            raise TypeError(f"OnnxMap.attrs must map gradir attribute names to ONNX ones, got {self.attrs!r}")
        if self.domain not in (ONNX_DOMAIN, MS_DOMAIN, GRADIR_DOMAIN):
            raise TypeError(f"OnnxMap.domain must be '', {MS_DOMAIN!r} or {GRADIR_DOMAIN!r}, got {self.domain!r}")
        if self.operands is not None:
            object.__setattr__(self, "operands", tuple(self.operands))
            if sorted(self.operands) != list(range(len(self.operands))):
                raise TypeError(f"OnnxMap.operands must be a permutation of 0..n-1, got {self.operands!r}")

    def op_type(self, cls: Any) -> str:
        """The ONNX op type of gradir op class ``cls``."""
        return self.name if self.name is not None else cls.op_name

    def onnx_attrs(self) -> dict[str, str]:
        """``{ONNX name: gradir name}``: the import's view of ``attrs``."""
        return {o: g for g, o in self.attrs.items()}

    def onnx_inputs(self, operands: list) -> list:
        """The op's operands in ONNX input order."""
        if self.operands is None:
            return list(operands)
        return [operands[k] if k < len(operands) else None for k in self.operands]

    def gradir_operands(self, inputs: list) -> list:
        """ONNX inputs in the op's operand order (the inverse of ``onnx_inputs``)."""
        if self.operands is None:
            return list(inputs)
        out: list = [None] * max(len(self.operands), len(inputs))
        for k, i in enumerate(self.operands):
            if k < len(inputs):
                out[i] = inputs[k]
        while out and out[-1] is None:
            out.pop()
        return out

    def opset_problem(self, op_type: str, opset: int) -> Optional[str]:
        """Why ai.onnx ``opset`` has no ``op_type`` (``None`` if it has); only ai.onnx ops have opsets here."""
        if self.domain != ONNX_DOMAIN:
            return None
        if self.since is not None and opset < self.since:
            return f"ONNX has {op_type} from opset {self.since}; use --opset {self.since} or later"
        if self.until is not None and opset > self.until:
            return f"ONNX has {op_type} until opset {self.until}; use --opset {self.until} or earlier"
        return None


# a user op without ONNX data: exported in ai.gradir without asking for it
_GRADIR = OnnxMap(domain=GRADIR_DOMAIN)


def is_user_op(cls: Any) -> bool:
    """Whether ``cls`` was defined outside the gradir package (a user's op, ``gradir.load_ops``)."""
    module = getattr(cls, "__module__", "") or ""
    return module != "gradir" and not module.startswith("gradir.")


def onnx_map(cls: Any) -> Optional[OnnxMap]:
    """The ONNX data of op class ``cls``: its own ``ONNX`` (not inherited: a subclass is another op); for
    a user op without one, the ``ai.gradir`` op itself (gradir cannot know a counterpart of a user's op,
    and asking for ``--custom-domain`` to export it would only be a hurdle); ``None`` for a built-in op
    without a counterpart that is data."""
    m = vars(cls).get("ONNX")
    if m is None and is_user_op(cls) and vars(cls).get("NO_ONNX") is None:
        return _GRADIR
    return m


def no_onnx(cls: Any) -> Optional[str]:
    """Why op class ``cls`` has no ONNX counterpart (its own ``NO_ONNX``), or ``None``."""
    return vars(cls).get("NO_ONNX")
