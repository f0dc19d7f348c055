"""Reading input arrays (.npy, .npz): malformed members and headers, byte orders, sizes, old header forms."""

from __future__ import annotations

import gradir
import numpy as np
import pytest
from gradir.cli.main import main


def test_a_big_endian_input_is_converted_and_other_dtypes_are_named_in_words():
    g = gradir.parse("input t0 : Float32 [3]\nt1 = Relu(t0)\noutput t1\n")
    x = np.array([1.5, -2.0, 3.0], dtype=">f4")
    out = gradir.compile(g).run({"t0": x})["t1"]
    np.testing.assert_array_equal(out, np.maximum(x.astype(np.float32), 0))
    with pytest.raises(gradir.InputError, match="got big-endian Float64"):
        gradir.compile(g).run({"t0": x.astype(">f8")})
    with pytest.raises(gradir.InputError, match="not an array"):
        gradir.compile(g).run({"t0": [1.0, [2.0, 3.0]]})


def test_a_big_endian_npy_through_the_cli(tmp_path, capsys):
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [3]\nt1 = Relu(t0)\noutput t1\n")
    np.save(tmp_path / "x.npy", np.array([1.5, -2.0, 3.0], dtype=">f4"))
    assert main(["run", str(g), "--input", f"t0={tmp_path / 'x.npy'}", "-o", str(tmp_path / "o.npz")]) == 0
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_array_equal(z["t1"], np.array([1.5, 0.0, 3.0], np.float32))


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


def test_an_npy_header_in_python_2_form_loads_without_a_numpy_warning(tmp_path, capsys):
    """NumPy's UserWarning (with a line of its source) reached the user for a header like
    ``'shape': (2L, 3L)``; the file is valid and loads."""
    import io
    import warnings
    import zipfile
    buf = io.BytesIO()
    np.save(buf, np.ones((2, 3), np.float32))
    data = buf.getvalue()
    end = data.index(b"\n") + 1  # the header's end: it is padded with spaces to its stated length
    header = data[10:end].replace(b"'shape': (2, 3), }", b"'shape': (2L, 3L), }")
    data = data[:10] + header[:-3] + b"\n" + data[end:]
    (tmp_path / "t0.npy").write_bytes(data)
    with zipfile.ZipFile(tmp_path / "in.npz", "w") as zf:
        zf.writestr("t0.npy", data)
    g = tmp_path / "g.gir"
    g.write_text("input t0 : Float32 [2, 3]\nt1 = Relu(t0)\noutput t1\n")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["run", str(g), "--input", f"t0={tmp_path / 't0.npy'}"]) == 0
        assert main(["run", str(g), "--inputs", str(tmp_path / "in.npz")]) == 0
    assert not seen, [str(w.message) for w in seen]
    cap = capsys.readouterr()
    assert cap.out.count("t1      Float32  [2, 3]    1    1     1  2.44949") == 2 and "Warning" not in cap.err
