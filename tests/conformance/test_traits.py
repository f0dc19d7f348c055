"""The traits concern: what an op declares as data (docs/ops.md lists it) names real things and holds
on its example: element-wise kinds, the ONNX Runtime gradient op it names, fusion siblings, the
operands it is linear in, its formula's names, how ``gradir run`` draws its operands."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gradir import OPS, Op
from gradir.ir.traits import evaluate_formula, formula_names

from .conftest import concern, fail, make_case, op_names


@concern("traits")
def check_traits(cls: type[Op]) -> None:
    from gradir.ir.attrs import SAMPLES
    if cls.ELEMENTWISE not in (None, "same", "broadcast"):
        fail(cls, "traits", f"ELEMENTWISE is {cls.ELEMENTWISE!r}, not None, 'same' or 'broadcast'")
    if cls.GRADIENT is not None and not (cls.GRADIENT in OPS and OPS[cls.GRADIENT].is_backward):
        fail(cls, "traits", f"GRADIENT names {cls.GRADIENT!r}, which is no registered gradient op")
    if cls.FUSES_INTO is not None:
        fused, index, many = cls.FUSES_INTO
        if not (fused in OPS and cls.attr_spec(index) is not None and OPS[fused].attr_spec(many) is not None):
            fail(cls, "traits", f"FUSES_INTO {cls.FUSES_INTO} names no op and attributes that exist")
    if not all(0 <= i < max(1, len(cls.OPERANDS)) for i in cls.LINEAR_IN):
        fail(cls, "traits", f"LINEAR_IN {cls.LINEAR_IN} names an operand it does not have")
    if cls.FORMULA is not None:
        if cls.ELEMENTWISE is None:
            fail(cls, "traits", "a FORMULA belongs to an element-wise op (ELEMENTWISE)")
        unknown = set(compile(cls.FORMULA, cls.op_name, "eval").co_names) - formula_names(cls)
        if unknown:
            fail(cls, "traits", f"its FORMULA uses unknown names {sorted(unknown)}")
    if cls.BROADCASTS is False and cls.ELEMENTWISE == "broadcast":
        fail(cls, "traits", "an element-wise op with broadcasting must say BROADCASTS")
    if cls.SHARD_ROWS and not (any(o.name == "shard_rows" and o.optional for o in cls.OPERANDS)
                               and cls.attr_spec("shard_axis") is not None):
        fail(cls, "traits", "SHARD_ROWS needs an optional operand shard_rows and an attribute shard_axis (what "
                            "the shard graph sets)")
    for o in cls.OPERANDS:  # Operand.sample: how ``gradir run`` draws example values, data the CLI reads
        if o.sample not in SAMPLES:
            fail(cls, "traits", f"operand {o.name}: unknown sample kind {o.sample!r}")
        if o.sample == "weights" and cls.attr_spec("hidden_size") is None:
            fail(cls, "traits", f"operand {o.name}: sample kind 'weights' reads hidden_size, which it lacks")


@pytest.mark.parametrize("name", op_names())
def test_traits(name: str) -> None:
    check_traits(OPS[name])


def _linear_groups(cls: type[Op]) -> list[tuple[int, ...]]:
    """The operand groups the formula is linear in: each operand of LINEAR_IN, or all of them together
    (LINEAR_JOINTLY); none for a variadic operand."""
    groups = [cls.LINEAR_IN] if cls.LINEAR_JOINTLY else [(i,) for i in cls.LINEAR_IN]
    return [g for g in groups if not any(cls.operand_spec(i).variadic for i in g)]


@concern("linear-in")
def check_linear_in(cls: type[Op]) -> None:
    """f(2a, ...) == 2 f(a, ...) for the operands it says it is linear in, on its example (float64; a NaN where the
    formula is undefined, e.g. PowGrad_X at a negative base, is NaN on both sides)."""
    case = make_case(cls, np.float64, concern="linear-in")
    ops = {o.name: a for o, a in zip(cls.OPERANDS, case.arrays) if a is not None}
    for group in _linear_groups(cls):
        twice = dict(ops, **{cls.OPERANDS[i].name: 2 * ops[cls.OPERANDS[i].name] for i in group})
        if not np.allclose(evaluate_formula(cls, twice, case.attrs), 2 * evaluate_formula(cls, ops, case.attrs),
                           rtol=1e-12, atol=1e-12, equal_nan=True):
            fail(cls, "linear-in", f"it is not linear in operand(s) {group}, as LINEAR_IN says")


@pytest.mark.parametrize("name", op_names(lambda c: c.FORMULA is not None and bool(c.LINEAR_IN)))
def test_linear_in_holds(name: str) -> None:
    check_linear_in(OPS[name])


def test_the_linearity_check_can_fail(monkeypatch: Any) -> None:
    monkeypatch.setattr(OPS["Exp"], "LINEAR_IN", (0,))
    with pytest.raises(pytest.fail.Exception, match="^Exp: linear-in: it is not linear in operand"):
        check_linear_in(OPS["Exp"])


def test_a_trait_naming_nothing_is_named(monkeypatch: Any) -> None:
    monkeypatch.setattr(OPS["Relu"], "GRADIENT", "NoSuchGrad")
    with pytest.raises(pytest.fail.Exception, match="^Relu: traits: GRADIENT names 'NoSuchGrad'"):
        check_traits(OPS["Relu"])


def test_shard_rows_is_a_trait_the_ops_declare_and_is_checked(monkeypatch: Any) -> None:
    """The shard graph gives a split op its rows by the SHARD_ROWS trait, not by the op's name."""
    assert {n for n in OPS if OPS[n].SHARD_ROWS} >= {"Dropout", "MaxPool"}
    monkeypatch.setattr(OPS["AveragePool"], "SHARD_ROWS", True)
    with pytest.raises(pytest.fail.Exception, match="^AveragePool: traits: SHARD_ROWS needs"):
        check_traits(OPS["AveragePool"])
