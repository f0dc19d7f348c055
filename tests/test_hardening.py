"""Faults found by fuzzing: each input that made gradir fail badly (exit 3, a traceback, a
quadratic blow-up), now a clear error or a working run."""

from __future__ import annotations


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
    assert rc == 1 and "type Float32 has rank 65; at most 64 dimensions are supported" in err
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
    from complexity import grows_linearly

    def verify(n: int):
        res = ", ".join(f"t{k + 1}" for k in range(n))
        text = f"input t0 : Float32 [2]\n{res} = Sum(t0)\noutput t1\n"

        def parse() -> None:
            with pytest.raises(gradir.VerifyError):
                gradir.parse(text)
        return parse
    grows_linearly(verify, 2_000)  # lines executed, not seconds
    verify(80_000)()


# rows 11 and 17: malformed and oversized input files
def _npy_bytes(a: np.ndarray) -> bytes:
    import io
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _with_header(a: np.ndarray, old: bytes, new: bytes) -> bytes:
    """An .npy of ``a`` whose header has ``old`` replaced by ``new`` (same header length)."""
    data = _npy_bytes(a)
    hl = int.from_bytes(data[8:10], "little")
    header = data[10:10 + hl].replace(old, new).rstrip(b" \n")
    assert len(header) < hl
    return data[:10] + header + b" " * (hl - 1 - len(header)) + b"\n" + data[10 + hl:]


def _zip_patched(tmp_path, name: str, local: int, central: int, value: int) -> str:
    """An .npz whose first member has the 2-byte field at ``local``/``central`` offsets of its local
    and central headers set to ``value`` (version needed, flags, compression method)."""
    import struct
    path = tmp_path / "ok.npz"
    np.savez(path, t0=np.zeros((2, 3), np.float32))
    b = bytearray(path.read_bytes())
    i, j = b.find(b"PK\x03\x04"), b.find(b"PK\x01\x02")
    b[i + local:i + local + 2] = struct.pack("<H", value)
    b[j + central:j + central + 2] = struct.pack("<H", value)
    out = tmp_path / name
    out.write_bytes(bytes(b))
    return str(out)


GIR = "input t0 : Float32 [2, 3]\nt1 = Relu(t0)\noutput t1\n"


@pytest.mark.parametrize("kind, want", [
    ("version", "zip file version 9.9"),
    ("compression", "compression method is not supported"),
    ("encrypted", "is encrypted"),
])
def test_malformed_npz_members_are_input_errors(tmp_path, capsys, kind, want):
    fields = {"version": (4, 6, 99), "compression": (8, 10, 77), "encrypted": (6, 8, 1)}
    npz = _zip_patched(tmp_path, f"{kind}.npz", *fields[kind])
    g = tmp_path / "g.gir"
    g.write_text(GIR)
    assert main(["run", str(g), "--inputs", npz]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{npz}: error: --inputs: ") and want in err, err


@pytest.mark.parametrize("old, new, want", [
    (b"'shape': (2, 3)", b"'shape': (True, 3)", "not a valid NumPy file"),
    (b"'descr'", b"'dexcr'", "Header does not contain the correct keys"),
    (b"'fortran_order': False", b"'fortran_order': {{{", "not a valid NumPy file"),
])
def test_malformed_npy_headers_are_input_errors(tmp_path, capsys, old, new, want):
    g = tmp_path / "g.gir"
    g.write_text(GIR)
    bad = tmp_path / "bad.npy"
    bad.write_bytes(_with_header(np.zeros((2, 3), np.float32), old, new))
    assert main(["run", str(g), "--input", f"t0={bad}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}: error: --input t0: ") and want in err, err


def test_an_input_too_large_for_memory_is_named_with_its_size(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text(GIR)
    huge = tmp_path / "huge.npy"  # a header that claims 2^42 floats (16 TiB), and no data
    huge.write_bytes(_with_header(np.zeros((2, 3), np.float32), b"'shape': (2, 3)", b"'shape': (4398046511104,)"))
    assert main(["run", str(g), "--input", f"t0={huge}"]) == 1
    err = capsys.readouterr().err
    assert f"{huge}: error: --input t0: (Float32 [4398046511104], 16 TiB) does not fit in memory" in err
    import zipfile
    npz = tmp_path / "huge.npz"
    with zipfile.ZipFile(npz, "w") as zf:
        zf.writestr("t0.npy", huge.read_bytes())
    assert main(["run", str(g), "--inputs", str(npz)]) == 1
    err = capsys.readouterr().err
    assert "--inputs: array 't0' (Float32 [4398046511104], 16 TiB) does not fit in memory" in err


# row 16: --threads has an upper bound, and a refused thread is an error, not a crash
def test_threads_have_an_upper_bound(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text(GIR)
    assert main(["run", str(g), "--threads", "100000"]) == 2
    assert "expected a positive integer up to 1024, got '100000'" in capsys.readouterr().err
    assert main(["run", str(g), "--threads", "9" * 5000]) == 2
    with pytest.raises(gradir.ArgumentError, match="at most 1024"):
        gradir.compile(g, threads=100000)


def test_a_thread_the_system_refuses_is_an_execution_error(monkeypatch):
    from gradir import executor, schedule
    monkeypatch.setattr(schedule, "INLINE_BYTES", 0)
    exe = gradir.compile("input t0 : Float32 [64, 64]\ninput t1 : Float32 [64, 64]\nt2 = Exp(t0)\nt3 = Exp(t1)\n"
                         "t4 = Add(t2, t3)\noutput t4\n", threads=3)
    assert exe.plan.heavy_concurrency
    pool = executor._executor(3)
    real = pool.submit
    calls = []

    def submit(fn, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("can't start new thread")
        return real(fn, *a, **k)
    monkeypatch.setattr(pool, "submit", submit)
    x = np.ones((64, 64), np.float32)
    with pytest.raises(gradir.ExecutionError, match="cannot start worker thread 3 of 3: can't start new thread"):
        exe.run({"t0": x, "t1": x})
    monkeypatch.setattr(pool, "submit", real)
    np.testing.assert_allclose(exe.run({"t0": x, "t1": x})["t4"], 2 * np.exp(x), rtol=1e-6)


# row 1: a long run of spaces in an op line's type annotation parses in linear time
@pytest.mark.parametrize("where", ["before the shape", "after the type", "before a stray token"])
def test_long_runs_of_spaces_parse_in_linear_time(where):
    sp = " " * 64_000
    line = {"before the shape": f"t1 = Relu(t0) : Float32{sp}[2]",
            "after the type": f"t1 = Relu(t0) : Float32 [2]{sp}",
            "before a stray token": f"t1 = Relu(t0) : Float32 [2]{sp}x"}[where]
    from complexity import cpu_seconds

    def parse() -> None:
        try:
            gradir.parse(f"input t0 : Float32 [2]\n{line}\noutput t1\n")
        except gradir.ParseError:
            pass
    assert cpu_seconds(parse) < 1.0  # regular expressions (C): this process's CPU time, not the wall clock


# rows 6 and 7: integers and value names too long to convert, element counts too large for a float
@pytest.mark.parametrize("text, msg", [
    ("input t0 : Float32 [" + "1" * 5000 + "]\noutput t0\n", "dimension 111111111111... has 5000 digits"),
    ("input t0 : Float32 [2]\nt1 = Softmax(t0, axis=" + "1" * 5000 + ")\noutput t1\n",
     "integer literal 111111111111... has 5000 digits; at most 19"),
    ("input t" + "1" * 5000 + " : Float32 [2]\noutput t0\n", "value name t11111111111... has 5000 digits; at most 18"),
    ("input t0 : Float32 [" + ", ".join(["9" * 19] * 20) + "]\noutput t0\n",
     "type Float32 has about 2^1262 elements; at most 2^48 are supported"),
])
def test_huge_numbers_are_located_errors(tmp_path, capsys, text, msg):
    rc, err = check(tmp_path, capsys, text)
    assert rc == 1 and msg in err
    for cmd in ("fmt", "plan", "grad", "run"):
        assert main([cmd, str(tmp_path / "g.gir")]) == 1
        assert "internal error" not in capsys.readouterr().err
