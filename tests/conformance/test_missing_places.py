"""The suite catches a place taken away: with one op's kernel, gradient rule, placement, ONNX mapping or
docs entry removed (or wrong), its check fails naming the op and the concern."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from gradir import OPS

from . import conftest
from .test_ops import check_docs, check_gradient, check_kernel, check_onnx, check_sharding, check_type_rule


def failure(check, *args) -> str:
    with pytest.raises(pytest.fail.Exception) as e:
        check(*args)
    return str(e.value)


def test_a_missing_kernel_is_named(monkeypatch):
    from gradir.backends.cpu.kernels import KERNELS
    monkeypatch.delitem(KERNELS, "Relu")
    assert failure(check_kernel, OPS["Relu"], np.float64, monkeypatch).startswith(
        "Relu: kernel: no kernel is registered for it")


def test_a_wrong_kernel_is_named(monkeypatch):
    from dataclasses import replace
    from gradir.backends.cpu.kernels import KERNELS
    info = KERNELS["Sigmoid"]
    monkeypatch.setitem(KERNELS, "Sigmoid", replace(info, fn=lambda x, out=None: KERNELS["Tanh"].fn(x, out=out)))
    assert failure(check_kernel, OPS["Sigmoid"], np.float32, monkeypatch).startswith(
        "Sigmoid: kernel: result t1 (float32) against the float64 reference: off by")


def test_a_missing_gradient_rule_is_named(monkeypatch):
    monkeypatch.setattr(OPS["Tanh"], "GRADIENT", None)  # its gradient op left unsaid: nothing derives a rule
    assert failure(check_gradient, OPS["Tanh"]).startswith("Tanh: gradient: no gradient rule")


def test_a_wrong_gradient_is_named(monkeypatch):
    from gradir.autodiff.driver import RULES
    monkeypatch.setitem(RULES, OPS["Sigmoid"], RULES[OPS["Neg"]])  # dX = -dY
    assert failure(check_gradient, OPS["Sigmoid"]).startswith(
        "Sigmoid: gradient: derived gradient against finite differences")


def test_a_wrong_placement_is_named(monkeypatch):
    """A sum over the batch axis placed as if element-wise (split, where it is a partial sum)."""
    monkeypatch.setattr(OPS["ReduceSum"], "SHARDING", "elementwise")
    message = failure(check_sharding, OPS["ReduceSum"], np.float64)
    assert message.startswith("ReduceSum: sharding: "), message


def test_a_missing_placement_is_named(monkeypatch):
    monkeypatch.setattr(OPS["Softmax"], "SHARDING", None)  # not element-wise, not a reduction: nothing derives one
    assert failure(check_sharding, OPS["Softmax"], np.float64).startswith("Softmax: sharding: no placement rule")


def test_a_missing_onnx_export_is_named(monkeypatch):
    pytest.importorskip("onnx")
    monkeypatch.setattr(OPS["Relu"], "ONNX", None)  # its ONNX data left out
    assert failure(check_onnx, OPS["Relu"]).startswith(
        "Relu: onnx: no ONNX export, and docs/onnx.md gives no reason")


def test_a_missing_onnx_import_is_named(monkeypatch):
    pytest.importorskip("onnx")
    from gradir.interop.onnx import import_ops, importer
    table = import_ops.handlers
    monkeypatch.setattr(importer, "handlers", lambda: {k: v for k, v in table().items() if k != ("", "Relu")})
    assert failure(check_onnx, OPS["Relu"]).startswith("Relu: onnx: its export does not import")


def test_a_missing_docs_entry_is_named(monkeypatch, tmp_path):
    os.makedirs(tmp_path / "docs")
    shutil.copy(os.path.join(conftest.ROOT, "docs", "onnx.md"), tmp_path / "docs" / "onnx.md")
    with open(os.path.join(conftest.ROOT, "docs", "ops.md"), encoding="utf-8") as f:
        text = f.read()
    assert "### `Gelu`" in text
    (tmp_path / "docs" / "ops.md").write_text(text.replace("### `Gelu`", "### `Gelu_was_here`"), encoding="utf-8")
    monkeypatch.setattr(conftest, "ROOT", str(tmp_path))
    assert failure(check_docs, OPS["Gelu"]).startswith("Gelu: docs: docs/ops.md has no entry for it")


def test_a_type_rule_that_crashes_is_named(monkeypatch):
    def infer(self, ctx):
        raise NotImplementedError
    monkeypatch.setattr(OPS["MatMul"], "infer", infer)
    assert failure(check_type_rule, OPS["MatMul"]).startswith("MatMul: type rule: ")


def test_an_op_without_an_example_is_named(monkeypatch):
    monkeypatch.setattr(OPS["Exp"], "FORMULA", None)  # the default example is the formula's
    assert failure(check_type_rule, OPS["Exp"]).startswith("Exp: type rule: no example")


def test_an_onnx_mapping_that_drops_an_attribute_is_named(monkeypatch):
    pytest.importorskip("onnx")
    from gradir.ir.onnxmap import OnnxMap
    monkeypatch.setattr(OPS["LeakyRelu"], "ONNX", OnnxMap())  # alpha left out: ONNX's default 0.01
    assert failure(check_onnx, OPS["LeakyRelu"]).startswith("LeakyRelu: onnx: its attributes come back otherwise")


def test_a_weight_gradient_split_instead_of_summed_is_named(monkeypatch):
    """A placement rule that says the weight's gradient stays split along the batch, where each shard
    holds a part of a sum (here the shard graph's own type check is what refuses it)."""
    from gradir.distributed.placement import split
    from gradir.distributed.rules import RULES
    monkeypatch.setitem(RULES, "wrong_split", lambda ctx: [split(0)] * len(ctx.op.results))
    monkeypatch.setattr(OPS["GradLSTMCellInput"], "SHARDING", "wrong_split")
    message = failure(check_sharding, OPS["GradLSTMCellInput"], np.float64)
    assert message.startswith("GradLSTMCellInput: sharding: "), message


def test_a_mean_placed_as_a_sum_is_named_by_its_numbers(monkeypatch):
    """A rule that makes the mean over the split axis a partial sum without rescaling it: it places
    everything, and only the numbers (each shard's mean added up) show it."""
    from gradir.distributed.placement import PARTIAL
    from gradir.distributed.rules import RULES
    monkeypatch.setitem(RULES, "sum_of_means", lambda ctx: [PARTIAL])
    monkeypatch.setattr(OPS["ReduceMean"], "SHARDING", "sum_of_means")
    message = failure(check_sharding, OPS["ReduceMean"], np.float64)
    assert message.startswith("ReduceMean: sharding: 2 shards split as {'t0': 0} (t1 partial): off by"), message
