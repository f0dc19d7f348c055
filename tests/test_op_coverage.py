"""One table-driven check that every registered op is complete: its definition (with traits that
hold), its kernel, its gradient rule (forward ops) and its test-strategy entry.  Adding an op
without one of them fails here, naming the op and the missing place (README: "Adding an op")."""

from __future__ import annotations

import numpy as np
import pytest

from gradir import OPS
from gradir import ShardError
from gradir.autodiff import RULES, gradient_rule
from gradir.kernels import KERNELS
from gradir.sharding.rules import placement_rule
from gradir.traits import evaluate_formula, formula_names

import strategies

NAMES = sorted(OPS)


def _missing(name: str) -> list[str]:
    cls = OPS[name]
    out = []
    if name not in KERNELS:
        out.append("its kernel in gradir/kernels/ (@kernel)")
    if not cls.is_backward and gradient_rule(cls) is None:
        out.append("its gradient rule in gradir/gradrules.py (@rule), a VJP or a GRADIENT")
    if name not in strategies.OP_EXAMPLES and name not in strategies.DECLARED_EXAMPLES:
        out.append("its entry in tests/strategies.py (OP_EXAMPLES)")
    try:
        placement_rule(cls)
    except ShardError:
        out.append("its sharding rule (derived for element-wise ops and reductions, else Op.SHARDING naming a "
                   "rule of gradir/sharding/rules.py)")
    if not (cls.__doc__ or "").strip():
        out.append("a docstring in its definition (docs/ops.md shows it)")
    return out


@pytest.mark.parametrize("name", NAMES)
def test_every_op_has_every_place(name):
    missing = _missing(name)
    assert not missing, f"op {name} lacks " + "; ".join(missing)


def test_the_check_sees_a_missing_place(monkeypatch):
    monkeypatch.delitem(KERNELS, "Relu")
    monkeypatch.setattr(OPS["Relu"], "GRADIENT", None)  # its rule is derived from GRADIENT
    monkeypatch.setattr(OPS["Relu"], "ELEMENTWISE", None)  # its placement is derived from ELEMENTWISE
    assert _missing("Relu") == ["its kernel in gradir/kernels/ (@kernel)",
                                "its gradient rule in gradir/gradrules.py (@rule), a VJP or a GRADIENT",
                                "its sharding rule (derived for element-wise ops and reductions, else Op.SHARDING "
                                "naming a rule of gradir/sharding/rules.py)"]
    monkeypatch.setattr(OPS["Relu"], "SHARDING", "no-such-rule")
    assert _missing("Relu")[-1].startswith("its sharding rule")
    monkeypatch.delitem(RULES, "Exp")  # a hand rule removed: nothing derives Exp's
    assert "its gradient rule in gradir/gradrules.py (@rule), a VJP or a GRADIENT" in _missing("Exp")


@pytest.mark.parametrize("name", NAMES)
def test_traits_name_real_things(name):
    cls = OPS[name]
    assert cls.ELEMENTWISE in (None, "same", "broadcast")
    if cls.GRADIENT is not None:
        assert cls.GRADIENT in OPS and OPS[cls.GRADIENT].is_backward, cls.GRADIENT
    if cls.FUSES_INTO is not None:
        fused, index, many = cls.FUSES_INTO
        assert fused in OPS and cls.attr_spec(index) is not None and OPS[fused].attr_spec(many) is not None
    assert all(0 <= i < max(1, len(cls.OPERANDS)) for i in cls.LINEAR_IN)
    if cls.FORMULA is not None:
        assert cls.ELEMENTWISE is not None, "a formula belongs to an element-wise op"
        code = compile(cls.FORMULA, name, "eval")
        assert set(code.co_names) <= formula_names(cls), set(code.co_names) - formula_names(cls)
    if cls.BROADCASTS is False and cls.ELEMENTWISE == "broadcast":
        pytest.fail(f"{name}: an element-wise op with broadcasting must say BROADCASTS")


def _operands(cls, rng, shape=(3, 5)) -> dict[str, np.ndarray]:
    out = {}
    for o in cls.OPERANDS:
        x = rng.standard_normal(shape)
        if o.name == "Y" and cls.op_name in ("SigmoidGrad",):
            x = 1 / (1 + np.exp(-x))  # a sigmoid output
        elif o.name == "Y" and cls.op_name == "TanhGrad":
            x = np.tanh(x)
        elif cls.op_name in ("Log", "Sqrt"):
            x = np.abs(x) + 0.1
        out[o.name] = x
    return out


FORMULAS = [n for n in NAMES if OPS[n].FORMULA is not None]


@pytest.mark.parametrize("name", FORMULAS)
def test_each_formula_is_what_the_kernel_computes(name):
    """The scalar formula a fusion pass would compile gives the kernel's numbers (Float64)."""
    cls = OPS[name]
    rng = np.random.default_rng(7)
    ops = _operands(cls, rng)
    attrs = {a.name: a.default for a in cls.ATTRS if not a.required}
    if cls.attr_spec("factor") is not None:
        attrs["factor"] = 0.75
    want = KERNELS[name].fn(*[ops[o.name] for o in cls.OPERANDS], out=None, **attrs)
    got = evaluate_formula(cls, ops, attrs)
    np.testing.assert_allclose(np.broadcast_to(got, np.shape(want)), want, rtol=1e-12, atol=1e-12)
    if cls.ELEMENTWISE == "same":
        assert np.shape(want) == ops[cls.OPERANDS[0].name].shape


def test_linear_in_holds_for_element_wise_ops():
    """f(2a, ...) == 2 f(a, ...) in each operand an op says it is linear in (all of them at once for
    LINEAR_JOINTLY), and not for an operand it does not list."""
    rng = np.random.default_rng(3)
    for name in FORMULAS:
        cls = OPS[name]
        ops = _operands(cls, rng)
        attrs = {a.name: a.default for a in cls.ATTRS if not a.required}
        if cls.attr_spec("factor") is not None:
            attrs["factor"] = 0.75
        groups = [cls.LINEAR_IN] if cls.LINEAR_JOINTLY else [(i,) for i in cls.LINEAR_IN]
        for group in groups:
            if any(cls.OPERANDS[min(i, len(cls.OPERANDS) - 1)].variadic for i in group):
                continue
            twice = dict(ops, **{cls.OPERANDS[i].name: 2 * ops[cls.OPERANDS[i].name] for i in group})
            i = group
            np.testing.assert_allclose(evaluate_formula(cls, twice, attrs), 2 * evaluate_formula(cls, ops, attrs),
                                       rtol=1e-12, atol=1e-12, err_msg=f"{name} is not linear in operand {i}")


def test_the_linearity_check_can_fail():
    ops = {"A": np.ones(3), "B": np.full(3, 2.0)}
    add = OPS["Add"]
    assert not np.allclose(evaluate_formula(add, dict(ops, A=2 * ops["A"])), 2 * evaluate_formula(add, ops))


@pytest.mark.parametrize("name", sorted(OPS))
def test_operand_sample_kinds_are_known_and_have_what_they_read(name: str) -> None:
    """``Operand.sample`` (how ``gradir run`` draws example values) is data the CLI interprets: each kind
    must be one it knows, and "weights" reads the op's ``hidden_size``."""
    from gradir.attrs import SAMPLES
    cls = OPS[name]
    for o in cls.OPERANDS:
        assert o.sample in SAMPLES, f"{name}.{o.name}: unknown sample kind {o.sample!r}"
        if o.sample == "weights":
            assert cls.attr_spec("hidden_size") is not None, f"{name}.{o.name}: 'weights' needs hidden_size"
