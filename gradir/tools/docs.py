"""Op reference text for ``gradir ops`` (plain) and ``gradir ops --markdown`` (docs/ops.md)."""

from __future__ import annotations

import inspect
import sys
from typing import Iterable

from ..ir.op import OPS, Op, format_attr_value

__all__ = ["ops_text", "ops_markdown", "FAMILIES"]

FAMILIES = [
    ("Activation gradients (ONNX Runtime semantics)", "activation", True),
    ("Activations", "activation", False),
    ("Arithmetic, MatMul, layout and reductions", "math", None),
    ("Losses (ONNX SoftmaxCrossEntropyLoss and its ORT gradient)", "loss", None),
    ("LSTM", "lstm", None),
    ("Shape helpers used by derived gradients", "shape", None),
    ("Constants (see format.md: the type is required)", "constant", None),
]


def _family(cls: type[Op]) -> str:
    return cls.__module__.rsplit(".", 1)[-1]


def _grouped() -> list[tuple[str, list[type[Op]]]]:
    from ..ops.userops import user_op_file
    out = []
    builtin = [c for c in OPS.values() if user_op_file(c) is None]
    for title, module, backward in FAMILIES:
        ops = [c for c in builtin if _family(c) == module and (backward is None or c.is_backward == backward)]
        if ops:
            out.append((title, ops))
    files: dict[str, list[type[Op]]] = {}  # user ops, by the file that defines them, in loading order
    for c in OPS.values():
        file = user_op_file(c)
        if file is not None:
            files.setdefault(file, []).append(c)
    out += [(f"User ops ({file})", ops) for file, ops in files.items()]
    listed = {c for _, ops in out for c in ops}
    families: dict[str, list[type[Op]]] = {}  # a family FAMILIES does not list: titled by its module's docstring
    for c in OPS.values():
        if c not in listed:
            families.setdefault(c.__module__, []).append(c)
    for module, ops in families.items():
        doc = (getattr(sys.modules.get(module), "__doc__", None) or "").strip()
        out.append((doc.split("\n")[0].rstrip(".") or "Other", ops))
    return out


def _attr_text(cls: type[Op]) -> str:
    parts = []
    for a in cls.ATTRS:
        if a.required:
            parts.append(f"{a.name} ({a.describe()}, required)")
        elif a.default is None:
            parts.append(f"{a.name} ({a.describe()}, optional)")
        else:
            parts.append(f"{a.name}={format_attr_value(a.default)} ({a.describe()})")
    return "; ".join(parts)


def ops_text(names: Iterable[str] = ()) -> str:
    names = list(names)
    lines = []
    for title, ops in _grouped():
        ops = [c for c in ops if not names or c.op_name in names]
        if not ops:
            continue
        lines.append(f"{title}:")
        for c in ops:
            kind = " [backward]" if c.is_backward else ""
            lines.append(f"  {c.op_name}{kind}: {c.summary()}")
            lines.append(f"      {c.signature()}")
            if c.ATTRS:
                lines.append(f"      attributes: {_attr_text(c)}")
        lines.append("")
    unknown = [n for n in names if n not in OPS]
    for n in unknown:
        lines.append(f"(no op named {n!r})")
    return "\n".join(lines).rstrip("\n") + "\n"


def op_traits(c: type) -> list[str]:
    """The traits an op declares, in words (docs/ops.md)."""
    out = []
    if c.ELEMENTWISE:
        out.append("element-wise" + (" with broadcasting" if c.ELEMENTWISE == "broadcast" else ""))
    if c.FORMULA:
        out.append(f"formula `{c.FORMULA}`")
    if c.LINEAR_IN:
        names = ", ".join(c.OPERANDS[min(i, len(c.OPERANDS) - 1)].name for i in c.LINEAR_IN)
        out.append(f"linear in {names}" + (" together" if c.LINEAR_JOINTLY and len(c.LINEAR_IN) > 1 else ""))
    if c.BROADCASTS and c.ELEMENTWISE != "broadcast":
        out.append("broadcasts")
    if c.REDUCTION:
        out.append("reduction")
    if c.SHAPE_ONLY:
        out.append("moves elements only")
    if c.GRADIENT:
        out.append(f"its gradient is `{c.GRADIENT}`")
    if c.VJP:
        out.append("its gradient comes from its VJP (" + ", ".join(
            f"`{g.op_name}`: d{k} = `{c.VJP[k]}`" for k, g in c.VJP_OPS.items()) + ")")
    if c.NO_GRADIENT_RESULTS:
        out.append("no gradient flows back from " + ", ".join(c.RESULTS[k] for k in c.NO_GRADIENT_RESULTS))
    if c.NO_GRADIENT_OPERANDS:
        out.append("not differentiable in " + ", ".join(c.OPERANDS[k].name for k in c.NO_GRADIENT_OPERANDS))
    if c.FUSES_INTO:
        out.append(f"siblings fuse into `{c.FUSES_INTO[0]}`")
    from ..ops.composite import CompositeOp
    if issubclass(c, CompositeOp):
        out.append("composite: compiled, differentiated and exported as its decomposition")
    from ..errors import ShardError
    from ..distributed.rules import placement_rule
    try:
        out.append(f"sharded by the `{placement_rule(c)}` rule ([distributed.md](distributed.md))")
    except ShardError:  # an op nothing says how to place: sharding refuses it
        pass
    return out


def ops_markdown(names: Iterable[str] = ()) -> str:
    """The op reference page (docs/ops.md is this text; a test keeps it current); with
    ``names``, only those ops' sections (under their family headings)."""
    names = list(names)
    out = [] if names else [
        "# gradir op reference", "",
        "Generated by `gradir ops --markdown`; do not edit by hand.", "",
        "Optional operands are marked `?` (write `_` to omit one that is followed by others);",
        "variadic operands are marked `...`. Attributes equal to their default are not printed.", ""]
    for title, ops in _grouped():
        ops = [c for c in ops if not names or c.op_name in names]
        if not ops:
            continue
        out.append(f"## {title}")
        out.append("")
        for c in ops:
            out.append(f"### `{c.op_name}`" + (" (backward)" if c.is_backward else ""))
            out.append("")
            doc = inspect.cleandoc(c.__doc__ or "")  # a docstring's later lines lose their indent
            if doc:
                out.append(doc)
                out.append("")
            out.append(f"`{c.signature()}`")
            out.append("")
            traits = op_traits(c)
            if traits:
                out.append("Traits: " + "; ".join(traits) + ".")
                out.append("")
            if c.OPERANDS:
                out.append("| operand | optional | notes |")
                out.append("|---|---|---|")
                for o in c.OPERANDS:
                    opt = "variadic" if o.variadic else ("yes" if o.optional else "no")
                    out.append(f"| `{o.name}` | {opt} | {o.doc} |")
                out.append("")
            if c.ATTRS:
                out.append("| attribute | kind | default | notes |")
                out.append("|---|---|---|---|")
                for a in c.ATTRS:
                    default = "required" if a.required else ("absent" if a.default is None
                                                             else f"`{format_attr_value(a.default)}`")
                    out.append(f"| `{a.name}` | {a.describe()} | {default} | {a.doc} |")
                out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
