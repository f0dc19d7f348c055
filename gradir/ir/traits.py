"""Evaluating the traits ops declare (``Op.ELEMENTWISE``, ``Op.FORMULA``, ...).

An element-wise op's ``FORMULA`` is written in the formula language of ``gradir.ir.formula`` (the one
definition of its functions); this module evaluates an op's formula with its operands and attributes
(float64 for checks: a test compares every formula with its op's kernel).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from . import formula

__all__ = ["FORMULA_FUNCTIONS", "evaluate_formula", "formula_names"]

# the NumPy implementations of the formula language's functions (kept for callers of this name)
FORMULA_FUNCTIONS: dict[str, Any] = {name: f.numpy for name, f in formula.FUNCTIONS.items()}


def formula_names(op_cls: type) -> set[str]:
    """The names a formula may use: the op's operands and attributes, and the language's functions."""
    return {o.name for o in op_cls.OPERANDS} | {a.name for a in op_cls.ATTRS} | set(formula.FUNCTIONS)


def formula_env(op_cls: type, operands: Mapping[str, Any], attrs: Optional[Mapping[str, Any]] = None) -> dict:
    """The names ``op_cls.FORMULA`` reads: ``attrs`` (defaults filled in), then ``operands`` by name."""
    env: dict[str, Any] = {}
    for a in op_cls.ATTRS:
        if attrs and a.name in attrs:
            env[a.name] = attrs[a.name]
        elif not a.required:
            env[a.name] = a.default
    env.update(operands)
    return env


def evaluate_formula(op_cls: type, operands: Mapping[str, Any], attrs: Optional[Mapping[str, Any]] = None,
                     dtype: Any = None) -> Any:
    """``op_cls.FORMULA`` evaluated on ``operands`` (by operand name) and ``attrs`` (defaults filled in);
    with ``dtype``, computed in that dtype (``formula.evaluate``)."""
    if op_cls.FORMULA is None:
        raise ValueError(f"{op_cls.op_name} has no formula")
    try:
        return formula.evaluate(op_cls.FORMULA, formula_env(op_cls, operands, attrs), dtype)
    except ValueError as e:
        raise ValueError(f"{op_cls.op_name}.FORMULA: {e}") from None
