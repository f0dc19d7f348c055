"""Faults the fuzzing harness (tests/test_fuzz.py) found, each now a test with its minimal input."""

from __future__ import annotations

import re

import numpy as np

from gradir.cli import main
from gradir.compare import compare_outputs


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
