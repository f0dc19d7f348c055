"""Faults found by fuzzing: each input that made gradir fail badly (exit 3, a traceback, a
quadratic blow-up), now a clear error or a working run."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gradir
from gradir.cli import main


def check(tmp_path, capsys, text: str) -> tuple[int, str]:
    f = tmp_path / "g.gir"
    f.write_text(text)
    rc = main(["check", str(f)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    return rc, err


# row 3: LSTMGrad without its required CAll and iofc
def test_lstm_grad_without_required_operands_is_a_check_error(tmp_path, capsys):
    text = ("input t0 : Float32 [2, 1, 3]\ninput t1 : Float32 [1, 8, 3]\ninput t2 : Float32 [1, 8, 2]\n"
            "t3, t4, t5, t6, t7 = LSTMTraining(t0, t1, t2, hidden_size=2)\n"
            "t8, t9, t10, t11, t12, t13, t14 = LSTMGrad(t0, t1, t2, _, _, _, t3, hidden_size=2)\noutput t8\n")
    rc, err = check(tmp_path, capsys, text)
    assert rc == 1 and "LSTMGrad: operands CAll, iofc are required but not given" in err
    assert main(["fmt", str(tmp_path / "g.gir")]) == 1


# row 4: GradLSTMCellInput without Bias (7 operands)
@pytest.mark.parametrize("operands, msg", [
    ("t6, t6, t0, t1, t2, t3, t4", "operand Bias is required but not given"),
    ("t6, _, t0, t1, t2, t3, t4", "operand Bias is required but not given"),
    ("t6, t6, t0, t1, t2, t3, _, t5", "operand W_hh is required; '_' is only allowed"),
])
def test_cell_gradient_with_missing_operands_is_a_check_error(tmp_path, capsys, operands, msg):
    text = ("input t0 : Float32 [4, 16]\ninput t1 : Float32 [4, 32]\ninput t2 : Float32 [4, 32]\n"
            "input t3 : Float32 [128, 16]\ninput t4 : Float32 [128, 32]\ninput t5 : Float32 [128]\n"
            "input t6 : Float32 [4, 32]\n"
            f"t7 = GradLSTMCellInput({operands}, input_index=0, hidden_size=32)\noutput t7\n")
    rc, err = check(tmp_path, capsys, text)
    assert rc == 1 and msg in err


def test_every_op_checks_every_required_operand():
    """The generic checker catches a missing required operand in every registered op, so no
    op's own type rule ever sees one missing."""
    for name, cls in gradir.OPS.items():
        required = [k for k, o in enumerate(cls.OPERANDS) if not o.optional and not o.variadic]
        if not required:
            continue
        last = required[-1]
        operands = [f"t{k}" for k in range(last)]  # everything up to, not including, the last required one
        op = cls([f"t{100 + k}" for k in range(8)], operands, {})
        with pytest.raises(gradir.VerifyError) as e:
            op.validate([gradir.TensorType("Float32", [2])] * len(operands))
        assert "required" in str(e.value) or "takes" in str(e.value), (name, str(e.value))


# row 5: in-place reuse of a rank-0 value
@pytest.mark.parametrize("threads", [1, 2])
def test_scale_of_a_scalar_then_element_wise_ops_runs(threads):
    g = gradir.parse("input t0 : Float32 scalar\nt1 = Scale(t0, factor=2.0)\nt2 = Relu(t1)\nt3 = Exp(t2)\n"
                     "t4 = TanhGrad(t3, t1)\nt5 = Add(t4, t0)\noutput t5, t3\n")
    out = gradir.compile(g, threads=threads).run({"t0": np.array(0.25, np.float32)})
    x = np.float32(0.25)
    t1 = np.float32(2.0) * x
    t3 = np.exp(np.maximum(t1, np.float32(0)))
    assert isinstance(out["t5"], np.ndarray) and out["t5"].shape == ()
    np.testing.assert_allclose(out["t3"], t3, rtol=1e-6)
    np.testing.assert_allclose(out["t5"], t3 * (1 - t1 * t1) + x, rtol=1e-6)


# rows 8 and 9: limits on inferred types and ranks
def test_an_inferred_type_over_the_element_limit_is_a_check_error(tmp_path, capsys):
    rc, err = check(tmp_path, capsys, "input t0 : Float32 [16777217, 1]\ninput t1 : Float32 [1, 16777217]\n"
                                      "t2 = Add(t0, t1)\noutput t2\n")
    assert rc == 1 and "Add: result t2 would have 281475010265089 elements; at most 2^48 are supported" in err


def test_rank_over_64_is_a_check_error(tmp_path, capsys):
    ones = ", ".join(["1"] * 65)
    rc, err = check(tmp_path, capsys, f"input t0 : Float32 [{ones}]\nt1 = Relu(t0)\noutput t1\n")
    assert rc == 1 and "input t0: its type has rank 65; at most 64 dimensions are supported" in err
    ones = ", ".join(["1"] * 33)
    axes = ", ".join(str(i) for i in range(32))
    rc, err = check(tmp_path, capsys, f"input t0 : Float32 [{ones}]\nt1 = Unsqueeze(t0, axes=[{axes}])\n"
                                      "output t1\n")
    assert rc == 1 and "Unsqueeze: result t1 would have rank 65" in err
    ones = ", ".join(["1"] * 64)
    assert check(tmp_path, capsys, f"input t0 : Float32 [{ones}]\nt1 = Relu(t0)\noutput t1\n")[0] == 0


# row 10: grad of a graph with nothing to differentiate
def test_grad_without_floating_point_inputs_is_a_clear_error(tmp_path, capsys):
    f = tmp_path / "g.gir"
    f.write_text("input t0 : Int32 [3]\nt1 = Neg(t0)\noutput t1\n")
    assert main(["grad", str(f)]) == 1
    err = capsys.readouterr().err
    assert "nothing to differentiate: the graph has no floating-point inputs (its inputs are t0 Int32 [3])" in err
    with pytest.raises(gradir.AutodiffError):
        gradir.grad(gradir.load(f))


# row 12: an op line with very many results is verified in linear time
def test_many_results_verify_in_linear_time():
    def timed(n: int) -> float:
        res = ", ".join(f"t{k + 1}" for k in range(n))
        text = f"input t0 : Float32 [2]\n{res} = Sum(t0)\noutput t1\n"
        t = time.perf_counter()
        with pytest.raises(gradir.VerifyError):
            gradir.parse(text)
        return time.perf_counter() - t
    small, big = timed(5_000), timed(80_000)
    assert big < 2.0 and big < 40 * max(small, 1e-3), (small, big)  # 16x the results: ~16x the time
