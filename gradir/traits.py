"""Evaluating the traits ops declare (``Op.ELEMENTWISE``, ``Op.FORMULA``, ...).

An element-wise op's ``FORMULA`` is a Python expression over its operand names, its
attribute names and the functions below.  ``evaluate_formula`` computes it with NumPy
(float64 for checks: a test compares every formula with its op's kernel); a fusion pass
can turn the same text into one loop.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import numpy as np

__all__ = ["FORMULA_FUNCTIONS", "evaluate_formula", "formula_names"]


def _erf(x: Any) -> Any:
    from scipy.special import erf
    return erf(x)


FORMULA_FUNCTIONS: dict[str, Any] = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt, "erf": _erf,
    "where": np.where, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "zeros_like": np.zeros_like,
    "pi": math.pi,
}


def formula_names(op_cls: type) -> set[str]:
    """The names a formula may use: the op's operands and attributes, and ``FORMULA_FUNCTIONS``."""
    return {o.name for o in op_cls.OPERANDS} | {a.name for a in op_cls.ATTRS} | set(FORMULA_FUNCTIONS)


def evaluate_formula(op_cls: type, operands: Mapping[str, Any], attrs: Optional[Mapping[str, Any]] = None) -> Any:
    """``op_cls.FORMULA`` evaluated on ``operands`` (by operand name) and ``attrs`` (defaults filled in)."""
    if op_cls.FORMULA is None:
        raise ValueError(f"{op_cls.op_name} has no formula")
    env = dict(FORMULA_FUNCTIONS)
    for a in op_cls.ATTRS:
        if attrs and a.name in attrs:
            env[a.name] = attrs[a.name]
        elif not a.required:
            env[a.name] = a.default
    env.update(operands)
    code = compile(op_cls.FORMULA, f"<{op_cls.op_name}.FORMULA>", "eval")
    unknown = set(code.co_names) - set(env)
    if unknown:
        raise ValueError(f"{op_cls.op_name}.FORMULA uses unknown names {sorted(unknown)}")
    with np.errstate(all="ignore"):
        return eval(code, {"__builtins__": {}}, env)  # noqa: S307 - the formulas are the ops' own class data
