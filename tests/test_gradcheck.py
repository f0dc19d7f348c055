"""``gradir gradcheck`` / ``gradir.gradcheck``: derived gradients against float64 finite differences.

Honest both ways: every forward sample passes, a deliberately wrong gradient (a patched rule, an edited
backward graph) fails, a kink exactly at the point is not a false failure, and a function whose finite
differences can never be trusted is reported as such rather than passed.
"""

from __future__ import annotations

import glob
import math
import os

import numpy as np
import pytest

import gradir
from gradir.autodiff import driver as autodiff
from gradir.cli.main import main
from gradir.tools.gradcheck import SAFETY, _estimate, promote
from gradir.cli.run import demo_inputs
from cli_runner import LABELLED_FWD as FWD, run_cli as _run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORWARD_SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*_forward.gir")))
MLP = os.path.join(ROOT, "samples", "mlp_forward.gir")


def _rows(out: str) -> dict[str, list[str]]:
    """The result table's rows by input name (cells split on whitespace)."""
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("input ")) + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("t") or ":" in line:
            break
        rows[line.split()[0]] = line.split()
    return rows


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("sample", FORWARD_SAMPLES, ids=os.path.basename)
def test_every_forward_sample_passes(capsys, sample):
    assert main(["gradcheck", sample]) == 0
    cap = capsys.readouterr()
    assert "gradir: promoted Float32 to Float64 for the check" in cap.err
    assert "gradir: generated every input from seed 0" in cap.err
    g = gradir.load(sample)
    rows = _rows(cap.out)
    assert list(rows) == [i.name for i in g.inputs if i.type.dtype.is_float]
    for name, cells in rows.items():
        assert cells[-1] == "pass" and cells[-5] == "3"  # status, directions
        assert float(cells[-4]) < 1e-8, (name, cells)   # worst |fd-ad|: far inside the tolerance


def test_python_api_report():
    r = gradir.gradcheck(gradir.load(MLP), wrt=["t3", "t1"], seed=2, directions=4)
    assert isinstance(r, gradir.GradcheckReport) and r.ok and r.promoted and r.generated == ["t0", "t1", "t2", "t3",
                                                                                              "t4"]
    assert [c.name for c in r.checks] == ["t3", "t1"] and [c.shape for c in r.checks] == [(32, 10), (16, 32)]
    for c in r.checks:
        assert len(c.directions) == 4 and all(d.status == "pass" and d.shift == 0 for d in c.directions)
        assert all(abs(d.fd) > 1e-3 and d.rel_err < 1e-8 for d in c.directions)  # real, nonzero derivatives
    assert "t3" in r.table() and str(r).startswith(r.table())


def test_a_wrong_gradient_rule_fails(monkeypatch, capsys):
    """The LSTMCell rule's Bias gradient off by 0.1%: caught, and only for the bias."""
    rule = autodiff.RULES[gradir.OPS["LSTMCell"]]

    def wrong(e, op, cts, need):
        got = list(rule(e, op, cts, need))
        if got[5] is not None:
            got[5] = e.Scale(got[5], factor=1.001)
        return got
    monkeypatch.setitem(autodiff.RULES, gradir.OPS["LSTMCell"], wrong)
    sample = os.path.join(ROOT, "samples", "lstm_cell_unrolled_forward.gir")
    assert main(["gradcheck", sample]) == 1
    cap = capsys.readouterr()
    rows = _rows(cap.out)
    assert rows["t6"][-1] == "FAIL" and 5e-4 < float(rows["t6"][-3]) < 2e-3  # relative error ~1e-3
    assert all(cells[-1] == "pass" for name, cells in rows.items() if name != "t6")
    assert "gradir: gradcheck failed for t6 (FAIL)" in cap.err
    assert "t6: fd " in cap.out and "the worst failing direction" in cap.out


def test_a_wrong_backward_graph_fails_and_the_checked_in_one_passes(tmp_path, capsys):
    good = os.path.join(ROOT, "samples", "mlp_forward.grad.gir")
    assert main(["gradcheck", MLP, "--backward", good]) == 0
    assert all(c[-1] == "pass" for c in _rows(capsys.readouterr().out).values())
    text = open(good).read()
    assert "t18 = ReluGrad(t15, t6)" in text
    bad = _write(tmp_path, "bad.grad.gir", text.replace("t18 = ReluGrad(t15, t6)", "t18 = Identity(t15)"))
    assert main(["gradcheck", MLP, "--backward", bad]) == 1
    status = {k: c[-1] for k, c in _rows(capsys.readouterr().out).items()}
    # the relu's gradient feeds x, W1 and b1 only
    assert status == {"t0": "FAIL", "t1": "FAIL", "t2": "FAIL", "t3": "pass", "t4": "pass"}


def test_relu_exactly_at_zero_is_not_a_false_failure(tmp_path, capsys):
    """At Relu's kink the central difference (|v|/2 per unit) and the gradient rule's choice (0) differ:
    the check notices that the differences are not smooth there and checks at a shifted point."""
    f = _write(tmp_path, "relu.gir", "input t0 : Float64 [4]\nt1 = Relu(t0)\noutput t1\n")
    np.savez(tmp_path / "x.npz", t0=np.array([0.0, 1.0, -1.0, 0.5]))
    assert main(["gradcheck", f, "--inputs", str(tmp_path / "x.npz")]) == 0
    cap = capsys.readouterr()
    assert _rows(cap.out)["t0"][-1] == "pass"
    assert "checked at a point shifted by 0.001" in cap.out
    assert "promoted" not in cap.err  # already Float64
    # a point away from the kink needs no shift
    r = gradir.gradcheck(open(f).read(), inputs={"t0": np.array([0.3, 1.0, -1.0, 0.5])})
    assert r.ok and all(d.shift == 0 for d in r.checks[0].directions)


def test_mlp_with_a_pre_activation_exactly_at_zero(monkeypatch):
    """x row 0 all zeros and b1[5] = 0 put relu's input at exactly 0: no false failure for b1 (whose
    directions move that pre-activation), and no shift for W2 (whose directions do not)."""
    g = gradir.load(MLP)
    x = demo_inputs(g, 0)
    x["t0"][0] = 0
    x["t2"][5] = 0
    r = gradir.gradcheck(g, wrt=["t2", "t3"], inputs=x)
    assert r.ok
    b1, w2 = r.checks
    assert any(d.shift for d in b1.directions) and not any(d.shift for d in w2.directions)


def test_dense_kinks_are_reported_not_passed(tmp_path, capsys):
    """300001 relus with kinks 4e-7 apart over ±0.06 around the point: every segment tried (the smallest
    is ±1e-6, the farthest shift 1e-2) crosses some, so the check says 'kink' and does not pass (it never
    passes what it could not verify)."""
    f = _write(tmp_path, "kinks.gir", "input t0 : Float64 [1]\ninput t1 : Float64 [300001]\nt2 = Add(t0, t1)\n"
                                      "t3 = Relu(t2)\noutput t3\n")
    np.savez(tmp_path / "x.npz", t0=np.array([0.0]), t1=(np.arange(300001) - 150000.5) * 4e-7)
    assert main(["gradcheck", f, "--inputs", str(tmp_path / "x.npz"), "--wrt", "t0"]) == 1
    cap = capsys.readouterr()
    assert _rows(cap.out)["t0"][-1] == "kink"
    assert "could not be checked" in cap.out and "gradir: gradcheck failed for t0 (kink)" in cap.err


@pytest.mark.parametrize("left,right", [(0.0, 1.0), (1.0, 0.0), (-2.0, 3.0), (1.0, 1.0001)])
def test_the_error_estimate_covers_a_kink_anywhere_on_the_segment(left, right):
    """A kink at ``offset * h`` from the point, for 241 offsets in [-1.2h, 1.2h]: wherever the estimate
    misses the true one-sided slope by more than the tolerance, the estimated error says it cannot be
    trusted, so a correct gradient never FAILs."""
    h = 1e-3
    for offset in np.linspace(-1.2, 1.2, 241):
        c = offset * h

        def loss(p):
            t = p["x"][0] - c
            return left * min(t, 0.0) + right * max(t, 0.0)
        p = {"x": np.array([0.0])}
        fd, err = _estimate(loss, p, "x", np.array([1.0]), h, loss(p))
        allowed = 1e-6 + 1e-5 * abs(fd)
        for ad in [left if c > 0 else right] + ([left, right] if c == 0 else []):
            assert abs(fd - ad) <= allowed or SAFETY * err > allowed, (offset, fd, ad, err)


def test_the_error_estimate_is_small_where_smooth():
    for f, df in [(np.sin, np.cos), (lambda t: np.exp(5 * t), lambda t: 5 * np.exp(5 * t))]:
        p = {"x": np.array([0.3])}
        loss = lambda q: float(f(q["x"][0]))
        fd, err = _estimate(loss, p, "x", np.array([1.0]), 1e-3, loss(p))
        assert abs(fd - df(0.3)) < 1e-9 and err < 1e-5 * abs(fd)


def test_inputs_saved_by_run_are_the_same_point(tmp_path, capsys):
    """Float32 inputs saved by `gradir run --save-inputs` are widened exactly: the check at them is the
    check at the seed's own point."""
    saved = str(tmp_path / "in.npz")
    assert main(["run", MLP, "--seed", "4", "--save-inputs", saved]) == 0
    capsys.readouterr()
    assert main(["gradcheck", MLP, "--seed", "4"]) == 0
    generated = capsys.readouterr().out
    assert main(["gradcheck", MLP, "--seed", "4", "--inputs", saved]) == 0
    cap = capsys.readouterr()
    assert cap.out == generated and "generated" not in cap.err


def test_generate_missing(tmp_path, capsys):
    x = demo_inputs(gradir.load(MLP), 6)
    np.savez(tmp_path / "part.npz", **{k: v for k, v in x.items() if k != "t3"})
    assert main(["gradcheck", MLP, "--inputs", str(tmp_path / "part.npz"), "--wrt", "t3"]) == 1
    err = capsys.readouterr().err
    assert "missing input t3" in err and "--generate-missing" in err and "Traceback" not in err
    assert main(["gradcheck", MLP, "--inputs", str(tmp_path / "part.npz"), "--wrt", "t3", "--generate-missing",
                 "--seed", "6"]) == 0
    assert "gradir: generated t3 from seed 6" in capsys.readouterr().err
    assert main(["gradcheck", MLP, "--generate-missing"]) == 2


@pytest.mark.parametrize("argv,msg", [
    (["--wrt", "t1,t9"], "14:1: error: wrt: t9 is computed here (by Add), not an input; gradients are with respect to the graph's inputs, t0, t1, t2, t3, t4"),
    (["--wrt", "t1,t99"], "error: wrt: the graph has no value t99, by name or label; the graph's inputs are t0, t1, t2, t3, t4"),
    (["--wrt", "t1,t1"], "wrt: t1 is listed twice"),
    (["--inputs", "{d}/wrong.npz"], "6:7: error: input t1: expected Float64 [16, 32], got Float64 [16, 5]"),
    (["--inputs", "{d}/nope.npz"], "--inputs: no such file"),
    (["--backward", "{d}/fwd.gir"], "the backward graph has 5 inputs; it needs 6: the forward graph's 5 inputs"),
    (["--backward", os.path.join(ROOT, "samples", "mlp_forward.grad.gir"), "--wrt", "t1"],
     "the backward graph has 5 outputs but 1 gradient is checked (t1)"),
])
def test_bad_requests_exit_1_with_a_clear_message(tmp_path, capsys, argv, msg):
    x = demo_inputs(gradir.load(MLP), 0)
    x["t1"] = x["t1"][:, :5]
    np.savez(tmp_path / "wrong.npz", **x)
    with open(MLP) as src:
        (tmp_path / "fwd.gir").write_text(src.read())
    assert main(["gradcheck", MLP, *[a.format(d=tmp_path) for a in argv]]) == 1
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err and "internal error" not in err


def test_a_non_float_wrt_is_an_error(tmp_path, capsys):
    f = _write(tmp_path, "sl.gir", "input t0 : Float64 [5, 3, 4]\ninput t1 : Float64 [1, 24, 4]\n"
                                   "input t2 : Float64 [1, 24, 6]\ninput t3 : Int32 [3]\n"
                                   "t4, t5, t6, t7, t8 = LSTMTraining(t0, t1, t2, _, t3, hidden_size=6)\noutput t4\n")
    assert main(["gradcheck", f, "--wrt", "t3"]) == 1
    assert "wrt: t3 has type Int32 [3]; only floating-point inputs have gradients" in capsys.readouterr().err
    r = gradir.gradcheck(open(f).read(), seed=1, directions=2)  # sequence lengths: drawn, not differentiated
    assert r.ok and [c.name for c in r.checks] == ["t0", "t1", "t2"]


def test_a_point_where_the_graph_is_not_finite_is_an_error(tmp_path, capsys):
    f = _write(tmp_path, "log.gir", "input t0 : Float64 [2]\nt1 = Log(t0)\noutput t1\n")
    np.savez(tmp_path / "x.npz", t0=np.array([1.0, -1.0]))
    assert main(["gradcheck", f, "--inputs", str(tmp_path / "x.npz")]) == 1
    assert "output t1 is not finite (NaN or Inf) at these inputs" in capsys.readouterr().err


def test_log_near_its_pole_retries_with_a_smaller_step():
    """At x = 3e-4, x ± 1e-3 v leaves Log's domain: the first try is unresolved, a smaller step is not."""
    r = gradir.gradcheck("input t0 : Float64 [1]\nt1 = Log(t0)\noutput t1\n", inputs={"t0": np.array([3e-4])})
    assert r.ok and all(d.step < 1e-3 and not d.shift for d in r.checks[0].directions)


def test_promote_makes_every_type_float64():
    g = gradir.load(MLP)
    p, changed = promote(g)
    assert changed and all(i.type.dtype is gradir.DType.Float64 for i in p.inputs)
    assert all(t.dtype is gradir.DType.Float64 for t in p.types.values())
    assert [i.type.shape for i in p.inputs] == [i.type.shape for i in g.inputs]
    assert "Float32" not in p.to_text() and g.to_text().count("Float32") > 5  # the original is untouched
    assert promote(p) == (p, False)


def test_help_has_a_description_and_examples(capsys):
    assert main(["gradcheck", "--help"]) == 0
    out = capsys.readouterr().out
    assert "dot-product test" in out and "Kinks" in out and "examples:" in out and "--backward" in out
    assert math.isclose(float(out.split("relative tolerance (default ")[1].split(")")[0]), 1e-5)


def test_gradcheck_inputs_is_repeatable_like_run(tmp_path, capsys):
    """`gradcheck --inputs A --inputs B` silently used only B."""
    f = tmp_path / "f.gir"
    f.write_text(FWD)
    x, w = np.array([0.1, 0.2, 0.3]), np.array([1.0, -1.0, 2.0])
    np.savez(tmp_path / "a.npz", x=x)
    np.savez(tmp_path / "b.npz", w=w)
    code, out, err = _run(["gradcheck", f, "--inputs", tmp_path / "a.npz", "--inputs", tmp_path / "b.npz"], capsys)
    assert code == 0, err
    assert "generated" not in err  # both archives used: nothing drawn from the seed
    np.savez(tmp_path / "both.npz", x=x, w=w)
    code, out, err = _run(["gradcheck", f, "--inputs", tmp_path / "a.npz", "--inputs", tmp_path / "both.npz"],
                          capsys)
    assert code == 1
    assert f"--inputs: 'x' is in both {tmp_path / 'a.npz'} and {tmp_path / 'both.npz'}" in err
    code, _, err2 = _run(["run", f, "--inputs", tmp_path / "a.npz", "--inputs", tmp_path / "both.npz"], capsys)
    assert code == 1 and err2 == err  # the same rule and message as run


def test_gradcheck_rows_show_labels(tmp_path, capsys):
    f = tmp_path / "f.gir"
    f.write_text(FWD)
    code, out, err = _run(["gradcheck", f], capsys)
    assert code == 0, err
    rows = [line.split()[0] for line in out.splitlines()[3:5]]
    assert rows == ["x", "w"]
    report = gradir.gradcheck(gradir.parse(FWD))
    assert [(c.name, c.label, c.key) for c in report.checks] == [("t0", "x", "x"), ("t1", "w", "w")]


GIR = "input t0 : Float32 [2, 3]\ninput t1 : Float32 [3]\nt2 = Add(t0, t1)\nt3 = Tanh(t2)\noutput t3\n"


@pytest.mark.parametrize("kwargs, msg", [
    ({"rtol": None}, "rtol must be a finite number >= 0, got None"),
    ({"atol": np.ones(3)}, "atol must be a finite number >= 0, got array([1., 1., 1.])"),
    ({"rtol": 1j}, "rtol must be a finite number >= 0, got 1j"),
    ({"rtol": 10 ** 400}, "rtol must be a finite number >= 0, got 1" + "0" * 56 + "..."),
    ({"atol": float("nan")}, "atol must be a finite number >= 0, got nan"),
    ({"rtol": True}, "rtol must be a finite number >= 0, got True"),
    ({"directions": 0}, "directions must be a positive integer, got 0"),
    ({"directions": 2.0}, "directions must be a positive integer, got 2.0"),
    ({"seed": -1}, "seed must be a non-negative integer, got -1"),
    ({"seed": None}, "seed must be a non-negative integer, got None"),
    ({"inputs": [1, 2]}, "inputs must be a mapping of input names to arrays, or None, got list"),
    ({"generate_missing": np.array([1, 2])}, "generate_missing must be True or False, got array([1, 2])"),
    ({"backward": []}, "gradcheck(backward=...) takes a Graph, IR text or a path, not list"),
    ({"threads": 10 ** 5000}, "threads must be at most 1024, got an int of 16610 bits"),
])
def test_gradcheck_arguments_are_checked(kwargs, msg):
    """``gradcheck`` with a bad argument raised ValueError, TypeError, AttributeError, OverflowError
    (an int over Python's 4300-digit str limit in a message) or compared an array with ``<=``."""
    with pytest.raises(gradir.ArgumentError) as e:
        gradir.gradcheck(GIR, **kwargs)
    assert str(e.value) == msg


@pytest.mark.parametrize("graph", [None, [], 3])
def test_gradcheck_of_something_not_a_graph(graph):
    with pytest.raises(gradir.ArgumentError, match=f"gradcheck\\(\\) takes a Graph, IR text or a path, "
                                                   f"not {type(graph).__name__}"):
        gradir.gradcheck(graph)


def test_gradcheck_takes_numpy_scalars_paths_and_ints(tmp_path):
    f = tmp_path / "g.gir"
    f.write_text(GIR)
    assert gradir.gradcheck(f, rtol=np.float32(1e-4), atol=0, seed=3, directions=1).ok
