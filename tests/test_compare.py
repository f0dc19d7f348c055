"""``gradir run --save-inputs / --generate-missing / --compare``: repeating a run and checking its numbers
without writing NumPy; ``gradir.tools.compare``'s element rule."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

import gradir
from gradir.ir.labels import input_key, label_text, output_keys
from gradir.cli.main import main
from gradir.tools.compare import DEFAULT_TOLERANCES, compare_outputs
from gradir.cli.run import demo_inputs
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = sorted(os.path.join(ROOT, "samples", f) for f in os.listdir(os.path.join(ROOT, "samples"))
                 if f.endswith(".gir"))
GRAPH = "input t0 : Float32 [2, 3]\ninput t1 : Float32 [2, 3]\nt2 = Mul(t0, t1)\nt3 = Neg(t2)\noutput t3, t2\n"


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _npz(path):
    with np.load(path) as d:
        return {k: d[k] for k in d.files}


@pytest.mark.parametrize("sample", SAMPLES, ids=os.path.basename)
def test_every_sample_round_trips_through_save_inputs_generate_missing_and_compare(tmp_path, capsys, sample):
    """A demo run saves its inputs and outputs; rerunning from the saved inputs, or from all but one of them
    with --generate-missing (the same seed draws the same value), matches the saved outputs exactly."""
    ins, outs, part = str(tmp_path / "in.npz"), str(tmp_path / "out.npz"), str(tmp_path / "part.npz")
    assert main(["run", sample, "--seed", "3", "--save-inputs", ins, "-o", outs]) == 0
    saved = _npz(ins)
    graph = gradir.load(sample)
    keys = {i.name: input_key(i) for i in graph.inputs}  # saved by label where there is one
    assert list(saved) == list(keys.values())
    for k, a in demo_inputs(graph, 3).items():
        np.testing.assert_array_equal(saved[keys[k]], a)
    capsys.readouterr()
    assert main(["run", sample, "--inputs", ins, "--compare", outs]) == 0
    rows = _rows(capsys.readouterr().out)
    assert list(rows) == output_keys(graph) and all(r.endswith(" pass") for r in rows.values())
    dropped = graph.inputs[-1]
    np.savez(part, **{k: v for k, v in saved.items() if k != input_key(dropped)})
    assert main(["run", sample, "--inputs", part, "--generate-missing", "--seed", "3", "--compare", outs]) == 0
    assert f"gradir: generated {dropped.name}{label_text(dropped.label)} from seed 3" in capsys.readouterr().err


def test_save_inputs_keeps_given_inputs_and_is_written_before_a_failing_run(tmp_path, capsys):
    f = _write(tmp_path, "log.gir", "input t0 : Float32 [4]\nt1 = Log(t0)\noutput t1\n")
    x = np.array([1, 2, -3, 4], np.float32)
    np.save(tmp_path / "x.npy", x)
    saved = tmp_path / "saved.npz"
    assert main(["run", f, "--input", f"t0={tmp_path / 'x.npy'}", "--check-numerics",
                 "--save-inputs", str(saved)]) == 1
    assert "produced NaN" in capsys.readouterr().err
    np.testing.assert_array_equal(_npz(saved)["t0"], x)  # the failing run can be repeated from it


def test_save_inputs_refuses_invalid_inputs(tmp_path, capsys):
    f = _write(tmp_path, "g.gir", GRAPH)
    np.savez(tmp_path / "in.npz", t0=np.ones((3, 2), np.float32), t1=np.ones((2, 3), np.float32))
    saved = tmp_path / "saved.npz"
    assert main(["run", f, "--inputs", str(tmp_path / "in.npz"), "--save-inputs", str(saved)]) == 1
    assert "input t0: expected Float32 [2, 3], got Float32 [3, 2]" in capsys.readouterr().err
    assert not saved.exists()


def test_generate_missing_draws_only_what_is_missing(tmp_path, capsys):
    f = _write(tmp_path, "g.gir", GRAPH)
    given = np.full((2, 3), 7, np.float32)
    np.save(tmp_path / "t1.npy", given)
    saved = str(tmp_path / "saved.npz")
    assert main(["run", f, "--input", f"t1={tmp_path / 't1.npy'}", "--generate-missing", "--seed", "5",
                 "--save-inputs", saved]) == 0
    assert "gradir: generated t0 from seed 5\n" in capsys.readouterr().err
    s = _npz(saved)
    np.testing.assert_array_equal(s["t1"], given)
    np.testing.assert_array_equal(s["t0"], demo_inputs(gradir.parse(GRAPH), 5)["t0"])
    np.savez(tmp_path / "all.npz", **s)
    assert main(["run", f, "--inputs", str(tmp_path / "all.npz"), "--generate-missing"]) == 0
    assert "every input was given; none generated" in capsys.readouterr().err


def test_generate_missing_needs_inputs_and_still_reports_strays(tmp_path, capsys):
    f = _write(tmp_path, "g.gir", GRAPH)
    assert main(["run", f, "--generate-missing"]) == 2
    assert "--generate-missing completes --inputs/--input" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "nope.gir"), "--generate-missing"]) == 2  # usage before the file
    np.savez(tmp_path / "in.npz", t7=np.ones((2, 3), np.float32))
    assert main(["run", f, "--inputs", str(tmp_path / "in.npz"), "--generate-missing"]) == 1
    assert "unexpected input t7" in capsys.readouterr().err


def test_generate_missing_with_unknown_dims_explains_the_2s(tmp_path, capsys):
    f = _write(tmp_path, "q.gir", "input t0 : Float32 [3, 4]\ninput t1 : Float32 [?, 4]\nt2 = Add(t0, t1)\n"
                                  "output t2\n")
    np.save(tmp_path / "x.npy", np.ones((3, 4), np.float32))
    assert main(["run", f, "--input", f"t0={tmp_path / 'x.npy'}", "--generate-missing"]) == 1
    err = capsys.readouterr().err
    assert "the input shapes are inconsistent" in err and "use 2 for every '?' dimension" in err


def _rows(out: str) -> dict[str, str]:
    """The comparison table's rows by output name."""
    table = out[out.index("compared with"):].splitlines()[3:]
    return {line.split()[0]: line for line in table}


def _setup_compare(tmp_path):
    f = _write(tmp_path, "g.gir", GRAPH)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "in.npz", t0=x, t1=x + 1)
    return f, str(tmp_path / "in.npz"), {"t3": -(x * (x + 1)), "t2": x * (x + 1)}


def test_compare_passes_and_fails_with_the_worst_element_located(tmp_path, capsys):
    f, ins, ref = _setup_compare(tmp_path)
    np.savez(tmp_path / "ref.npz", **ref)
    assert main(["run", f, "--inputs", ins, "--compare", str(tmp_path / "ref.npz")]) == 0
    assert [r.endswith(" pass") for r in _rows(capsys.readouterr().out).values()] == [True, True]
    bad = {k: v.copy() for k, v in ref.items()}
    bad["t2"][1, 2] += 1e-3   # 20 -> 20.001: |a-r| 1e-3 > 1e-5 + 1.3e-6 * 20
    bad["t2"][0, 1] += 1e-4
    np.savez(tmp_path / "bad.npz", **bad)
    assert main(["run", f, "--inputs", ins, "--compare", str(tmp_path / "bad.npz")]) == 1
    cap = capsys.readouterr()
    rows = _rows(cap.out)
    assert "(1, 2)" in rows["t2"] and rows["t2"].endswith("FAIL (2 of 6 elements)") and "0.000999" in rows["t2"]  # float32 20.001
    assert rows["t3"].endswith(" pass")
    assert "1 of 2 outputs does not match" in cap.err and ": t2" in cap.err
    # looser tolerances accept the same reference
    assert main(["run", f, "--inputs", ins, "--compare", str(tmp_path / "bad.npz"), "--atol", "2e-3"]) == 0
    assert main(["run", f, "--inputs", ins, "--compare", str(tmp_path / "bad.npz"), "--rtol", "1e-4"]) == 0


@pytest.mark.parametrize("change,reason", [
    (lambda r: r.pop("t2"), "FAIL (missing from the reference)"),
    (lambda r: r.update(t2=r["t2"].T.copy()), "FAIL (the reference has shape [3, 2])"),
    (lambda r: r.update(t2=r["t2"].astype(np.float64)), "FAIL (the reference is Float64, the output Float32)"),
])
def test_compare_missing_wrong_shape_or_dtype_fails_that_output(tmp_path, capsys, change, reason):
    f, ins, ref = _setup_compare(tmp_path)
    change(ref)
    np.savez(tmp_path / "ref.npz", **ref)
    assert main(["run", f, "--inputs", ins, "--compare", str(tmp_path / "ref.npz")]) == 1
    cap = capsys.readouterr()
    assert _rows(cap.out)["t2"].endswith(reason)
    assert "Traceback" not in cap.err and "does not match" in cap.err


def test_compare_mentions_reference_arrays_that_are_not_outputs(tmp_path, capsys):
    f, ins, ref = _setup_compare(tmp_path)
    np.savez(tmp_path / "ref.npz", t9=np.zeros(2), **ref)
    assert main(["run", f, "--inputs", ins, "--compare", str(tmp_path / "ref.npz")]) == 0
    assert "warning: " in capsys.readouterr().err


@pytest.mark.parametrize("setup,msg", [
    (lambda d: str(d / "nope.npz"), "--compare: no such file"),
    (lambda d: str(d / "corrupt.npz"), "--compare: not a valid NumPy file"),
    (lambda d: str(d / "pickled.npz"), "pickles"),
    (lambda d: str(d / "one.npy"), "--compare: expected an .npz archive"),
])
def test_compare_bad_reference_files_exit_1_before_running(tmp_path, capsys, setup, msg):
    f, ins, _ = _setup_compare(tmp_path)
    (tmp_path / "corrupt.npz").write_bytes(b"PK\x03\x04 not a zip")
    np.savez(tmp_path / "pickled.npz", t2=np.array([{"a": 1}], dtype=object))
    np.save(tmp_path / "one.npy", np.zeros(3))
    assert main(["run", f, "--inputs", ins, "--compare", setup(tmp_path)]) == 1
    cap = capsys.readouterr()
    assert msg in cap.err and "Traceback" not in cap.err
    assert "L2 norm" not in cap.out  # nothing ran


@pytest.mark.parametrize("argv,msg", [
    (["--rtol", "1e-3"], "--rtol and --atol are tolerances for --compare"),
    (["--compare", "r.npz", "--atol", "-1"], "expected a finite number >= 0"),
    (["--compare", "r.npz", "--rtol", "nan"], "expected a finite number >= 0"),
])
def test_compare_tolerance_usage_errors(tmp_path, capsys, argv, msg):
    f = _write(tmp_path, "g.gir", GRAPH)
    try:
        rc = main(["run", f, *argv])
    except SystemExit as e:
        rc = e.code
    assert rc == 2 and msg in capsys.readouterr().err


def test_compare_rule_nans_infinities_and_relative_error_at_zero():
    a = np.array([np.nan, np.inf, 0.0, 1.0, 2.0])
    check = compare_outputs({"y": a}, {"y": a.copy()}).checks[0]
    assert check.ok and check.max_abs == 0 and check.max_rel == 0  # NaN == NaN in place, inf == inf
    r = np.array([np.nan, -np.inf, 1e-9, 1.0, 2.0])
    c = compare_outputs({"y": a}, {"y": r}).checks[0]
    assert c.failed == 1 and c.worst == (1,) and c.max_abs == math.inf  # inf vs -inf; 0 vs 1e-9 is close
    c = compare_outputs({"y": np.array([1.0, 0.5])}, {"y": np.array([np.nan, 0.5])}).checks[0]
    assert c.failed == 1 and c.worst == (0,)  # a number against NaN fails
    c = compare_outputs({"y": np.array([0.0, 1e-3])}, {"y": np.array([0.0, 0.0])}).checks[0]
    assert c.max_rel == math.inf and c.max_abs == 1e-3 and c.failed == 1 and c.worst == (1,)
    c = compare_outputs({"y": np.array([0.0, 3.0])}, {"y": np.array([0.0, 2.0])}).checks[0]
    assert c.max_rel == 0.5


def test_compare_defaults_by_dtype_and_integers_exactly():
    assert DEFAULT_TOLERANCES[gradir.DType.Float32] == (1.3e-6, 1e-5)
    f32 = np.array([1.0], np.float32)
    assert compare_outputs({"y": f32}, {"y": f32 + np.float32(5e-6)}).ok
    assert not compare_outputs({"y": f32.astype(np.float64)}, {"y": f32.astype(np.float64) + 5e-6}).ok
    i = np.array([3, 4], np.int32)
    assert compare_outputs({"y": i}, {"y": i.copy()}).ok
    c = compare_outputs({"y": i}, {"y": i + np.array([0, 1], np.int32)}).checks[0]
    assert not c.ok and c.worst == (1,) and (c.rtol, c.atol) == (0.0, 0.0)


def test_compare_integers_exactly_as_integers_not_through_float64():
    """2**60 and 2**60 + 1 are one float64: the comparison passed."""
    a = np.array([2 ** 60, -(2 ** 62), 7], np.int64)
    c = compare_outputs({"y": a}, {"y": a + np.array([1, -1, 0], np.int64)}).checks[0]
    assert not c.ok and c.failed == 2 and c.max_abs == 1.0
    assert compare_outputs({"y": a}, {"y": a + 1}, atol=1).ok  # a given tolerance still applies
    ext = np.array([-(2 ** 63), 2 ** 63 - 1], np.int64)  # the difference 2**64 - 1: no overflow
    c = compare_outputs({"y": ext}, {"y": ext[::-1].copy()}).checks[0]
    assert c.failed == 2 and c.max_abs == float(2 ** 64 - 1)
    u = np.array([0, 2 ** 64 - 1], np.uint64)
    assert compare_outputs({"y": u}, {"y": u[::-1].copy()}).checks[0].failed == 2
    assert not compare_outputs({"y": np.array([True])}, {"y": np.array([False])}).ok


@pytest.mark.parametrize("dtype", [">f4", ">i4", ">i8"])
def test_compare_accepts_a_big_endian_reference_by_value(dtype):
    native = np.dtype(dtype).newbyteorder("=")
    a = np.arange(6, dtype=native).reshape(2, 3)
    assert compare_outputs({"y": a}, {"y": a.astype(dtype)}).ok
    bad = a.astype(dtype)
    bad[1, 2] += 1
    c = compare_outputs({"y": a}, {"y": bad}).checks[0]
    assert c.problem is None and c.failed == 1 and c.worst == (1, 2)


def test_run_compare_with_a_big_endian_reference_file(tmp_path, capsys):
    f, ins, ref = _setup_compare(tmp_path)
    np.savez(tmp_path / "ref.npz", **{k: v.astype(v.dtype.newbyteorder(">")) for k, v in ref.items()})
    assert main(["run", f, "--inputs", ins, "--compare", str(tmp_path / "ref.npz")]) == 0
    assert [r.endswith(" pass") for r in _rows(capsys.readouterr().out).values()] == [True, True]


def test_compare_of_a_rank_0_output(tmp_path, capsys):
    """``run --compare`` on a graph with a scalar output (ReduceSum over every axis) crashed: the
    element-wise arithmetic on 0-d arrays gave NumPy scalars, which take no item assignment."""
    c = compare_outputs({"y": np.array(4.5, np.float32)}, {"y": np.array(4.5, np.float32)}).checks[0]
    assert c.ok and c.max_abs == 0 and c.worst is None
    c = compare_outputs({"y": np.array(4.5, np.float32)}, {"y": np.array(5.0, np.float32)}).checks[0]
    assert not c.ok and c.failed == 1 and c.max_abs == 0.5 and c.worst == ()
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2, 3]\nt1 = ReduceSum(t0)\noutput t1\n")
    assert main(["run", str(g), "-o", str(tmp_path / "out.npz")]) == 0
    assert main(["run", str(g), "--compare", str(tmp_path / "out.npz")]) == 0
    np.savez(tmp_path / "ref.npz", t1=np.array(1e6, np.float32))
    assert main(["run", str(g), "--compare", str(tmp_path / "ref.npz")]) == 1
    cap = capsys.readouterr()
    assert "internal error" not in cap.err and "1 of 1 output does not match" in cap.err
    assert re.search(r"^t1\s+scalar\s+1e\+06\s+1\s+\(\)\s.*FAIL \(1 of 1 element\)$", cap.out, re.M), cap.out
