"""Fuzzing the ``.npz`` writers: whatever the keys and arrays, an archive reads back as written, or the
write is refused with a located ``GradirError`` and no file is left behind.

- ``_writer``: ``gradir.arrayfiles.write_npz`` (behind ``run -o``, ``--save-inputs`` and ``gradir
  import``'s weights file) on random keys (NumPy's and zipfile's keyword names, Unicode, lone
  surrogates, NUL, ``/`` and ``..``, empty, lengths around the 65,535-byte limit of a zip member name,
  pairs ``x`` / ``x.npy`` that ``np.load`` reads as one) and random arrays (every dtype NumPy writes
  without pickles, big-endian, 0-d, empty; now and then an object array, which must be refused).
  A written archive must read back through ``read_npz`` and through ``np.load`` with the same keys in
  the same order, and the same dtype, shape and bytes for each array.
- ``_cli_labels``: a small graph with random labels through ``gradir run -o --save-inputs``: exit 0
  with every key in both files, or exit 1 with a message and neither file written (never 3).

Budget and time limits as for ``tests/test_fuzz.py`` (``GRADIR_FUZZ_BUDGET`` seconds for this file,
shared as the ``campaign`` calls say; unset: a small fixed number of examples, derandomized).
See docs/fuzzing.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gradir import GradirError
from gradir.arrayfiles import MAX_MEMBER_NAME, read_npz, write_npz
from gradir.cli.main import main
from fuzzing import API_SECONDS, CLI_SECONDS, campaign, examples, fuzz_settings, time_limit

# names NumPy's savez/load/format and zipfile take as parameters: as keyword arguments they were lost
KEYWORDS = ["allow_pickle", "file", "fix_imports", "args", "kwds", "max_header_size", "mmap_mode", "encoding",
            "allow_zip64", "compression", "mode", "pickle_kwargs", "arr", "self", "zipf", "compresslevel"]
ODD = ["", "/", "a/b", "a/", "../x", "/abs", "\\", "a\\b", ".", "..", ".npy", "x.npy", "x.npy.npy", "é", "😀",
       "\u2028", "t0", "a b", "\t", "\n", "\x7f", "\ufeff", "CON", "nul"]
SURROGATES = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
LONG = st.integers(MAX_MEMBER_NAME - 8, MAX_MEMBER_NAME - 2).map(lambda n: "k" * n)  # the limit: 65531 characters
LONG_UNICODE = st.integers(MAX_MEMBER_NAME // 2 - 4, MAX_MEMBER_NAME // 2).map(lambda n: "é" * n)  # 2 bytes each
# keys that cannot be members are drawn one time in sixteen, so that most archives are written and read back
BAD_OR_BIG = st.one_of(SURROGATES, LONG, LONG_UNICODE, st.sampled_from(["a\x00b", "\x00", "x\ud800y"]))
KEYS = st.integers(0, 15).flatmap(lambda k: BAD_OR_BIG if k == 0 else st.one_of(
    st.sampled_from(KEYWORDS), st.sampled_from(ODD), st.text(max_size=16)))

DTYPES = st.sampled_from([np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8,
                          np.uint64, np.bool_, np.complex64, np.complex128, ">f4", ">f8", ">i2", ">i8", ">u4",
                          ">c8", "<U3", ">U2", "S3", "datetime64[s]", ">m8[ms]", [("a", "<f4"), ("b", ">i2")]])
ARRAYS = hnp.arrays(DTYPES.map(np.dtype), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
OBJECTS = st.just(np.array([1, "a", None], dtype=object))


@st.composite
def archives(draw) -> dict:
    """Keys with arrays; one time in four, one key's ``KEY.npy`` is added too (what np.load reads as one)."""
    keys = draw(st.lists(KEYS, min_size=0, max_size=6, unique=True))
    if keys and draw(st.integers(0, 3)) == 0:
        keys.append(draw(st.sampled_from(keys)) + ".npy")
    arrays = {}
    for k in dict.fromkeys(keys):
        arrays[k] = draw(OBJECTS) if draw(st.integers(0, 30)) == 0 else draw(ARRAYS)
    return arrays


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@contextlib.contextmanager
def _directory():
    with tempfile.TemporaryDirectory(prefix="gradir-fuzz-npz-") as d:
        yield d


@fuzz_settings(examples(60))
@given(archives())
def _writer(arrays: dict) -> None:
    note(f"keys: {[k if len(k) < 80 else f'{k[:10]}... ({len(k)})' for k in arrays]}")
    with _directory() as d:
        path = os.path.join(d, "out.npz")
        with time_limit(API_SECONDS, "write_npz"):
            try:
                write_npz(path, arrays)
            except GradirError as e:
                assert path in e.render() and "cannot write outputs" in e.render()
                assert os.listdir(d) == [], "a refused write left a file"
                return
        assert os.listdir(d) == ["out.npz"]
        with time_limit(API_SECONDS, "read_npz"):
            got = read_npz(path, "fuzz")
        assert list(got) == list(arrays)
        for k, a in arrays.items():
            assert _same(got[k], a), k
        with np.load(path, allow_pickle=False) as z:  # NumPy's own reader: the same arrays under the same keys
            assert list(z.files) == list(arrays)
            for k, a in arrays.items():
                assert _same(z[k], a), k


def test_npz_writer_round_trips_or_refuses():
    campaign(_writer, 0.6)


LABELS = st.one_of(st.sampled_from(KEYWORDS + ODD), st.text(max_size=12), SURROGATES)


@fuzz_settings(examples(25))
@given(st.lists(LABELS, min_size=4, max_size=4))
def _cli_labels(labels: list) -> None:
    """Two labelled inputs and two labelled outputs, through run -o and --save-inputs."""
    def lab(k: int) -> str:
        return json.dumps(labels[k], ensure_ascii=False)
    text = (f"graph labels\ninput t0 {lab(0)} : Float32 [2]\ninput t1 {lab(1)} : Float32 [2]\n"
            f"t2 = Add(t0, t1) : Float32 [2]\nt3 = Mul(t0, t1) : Float32 [2]\noutput t2 {lab(2)}, t3 {lab(3)}\n")
    note(text)
    with _directory() as d:
        g, out, ins = (os.path.join(d, n) for n in ("g.gir", "out.npz", "in.npz"))
        with open(g, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        err = io.StringIO()
        with time_limit(CLI_SECONDS, "run -o --save-inputs"), contextlib.redirect_stderr(err), \
                contextlib.redirect_stdout(io.StringIO()):
            code = main(["run", g, "-o", out, "--save-inputs", ins])
        assert code in (0, 1), (code, err.getvalue())
        if code == 1:
            assert "error:" in err.getvalue() and "Traceback" not in err.getvalue()
            assert sorted(os.listdir(d)) == ["g.gir"], "a refused run wrote a file"
            return
        assert list(read_npz(ins, "t")) == labels[:2] and list(read_npz(out, "t")) == labels[2:]


def test_run_o_and_save_inputs_with_random_labels():
    campaign(_cli_labels, 0.4)
