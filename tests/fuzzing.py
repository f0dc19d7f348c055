"""The fuzzing harness's machinery: budgets, time limits, and the generators of bad input.

``tests/test_fuzz.py`` holds the properties; this module holds what they are built from:

- ``campaign``: run a Hypothesis property for its share of the budget (``GRADIR_FUZZ_BUDGET``
  seconds for the whole file; unset or 0: a fixed, small number of examples, derandomized);
- ``time_limit``: fail an example whose call takes longer than its bound, interrupting it
  (SIGALRM: a runaway regular expression or parser loop is stopped, not waited for);
- ``mutated_texts``: the shipped samples and random valid graphs (``strategies.graphs``) mutated
  token by token: deletion, duplication, swaps, numbers made huge/negative/zero/fractional, dtype
  and name swaps, truncation, long runs of one character or token, lines repeated many times;
- ``npy_files``/``npz_files``: valid array files mutated byte by byte, in their headers and in their
  zip fields;
- ``junk``: Python values of every kind, for the API's arguments.

See docs/fuzzing.md.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import re
import signal
import struct
import sys
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gradir import DType, Graph, OPS
from gradir.backends.cpu.kernels import KERNELS, jit
from strategies import commented_texts, graphs

# -- budget ----------------------------------------------------------------------------------------
try:
    BUDGET = float(os.environ.get("GRADIR_FUZZ_BUDGET", "0") or 0)
except ValueError:
    raise SystemExit(f"GRADIR_FUZZ_BUDGET must be a number of seconds, got {os.environ['GRADIR_FUZZ_BUDGET']!r}")
ROUND = 30  # examples per round of a budgeted campaign (a failure found in a round is shrunk at once)

# Per-call time bounds: a gradir command on a file under 1 MB, and one in-process API call.
CLI_SECONDS = 20.0
API_SECONDS = 10.0
MAX_FILE = 1_000_000  # bytes: the size of the largest generated file

REPO = Path(__file__).resolve().parent.parent
SAMPLES = sorted((REPO / "samples").glob("*.gir"))
SAMPLE_TEXTS = [p.read_text(encoding="utf-8") for p in SAMPLES]


@pytest.fixture(scope="module", autouse=True)
def kernels():
    """NumPy kernels without a budget; with one, numba's, compiled before the clock starts.  A property file
    that imports this fixture runs under it."""
    if BUDGET and jit.available():
        for k in KERNELS.values():
            if k.warm is not None:
                for dt in (np.float32, np.float64):
                    k.warm(np.dtype(dt))
        yield
    else:
        with jit.disabled():
            yield


def fuzz_settings(examples: int) -> settings:
    """Settings of one round: no example database (a campaign explores, it does not replay), no
    deadline (``time_limit`` bounds each call instead), every health check off (big, slow,
    filtered examples are the point), derandomized unless a budget is given (a plain test run is the
    same run every time: one random round once took 1,080 s where the next took 4 s), and the first
    failure found is the one shrunk and reported (shrinking a dozen at once takes many minutes)."""
    return settings(max_examples=examples, deadline=None, database=None, derandomize=not BUDGET,
                    suppress_health_check=list(HealthCheck), print_blob=True, report_multiple_bugs=False)


def campaign(prop: Callable[[], None], share: float) -> int:
    """Run ``prop`` (a ``@given`` test) once, then again while its ``share`` of ``BUDGET`` is not spent.

    Each call is a new random round of ``ROUND`` examples (``prop`` must carry ``fuzz_settings``);
    without a budget it is called once, with the examples its settings give.  Returns the rounds run.
    """
    end = time.monotonic() + BUDGET * share
    rounds = 0
    while True:
        prop()
        rounds += 1
        if time.monotonic() >= end:
            return rounds


def examples(ci: int) -> int:
    """Examples per call of a property: ``ci`` without a budget, a round with one."""
    return ROUND if BUDGET else ci


# -- time limits -----------------------------------------------------------------------------------
class _Overtime(BaseException):
    """Raised by SIGALRM inside the call being timed.  A BaseException, so that gradir's own
    ``except Exception`` handlers (the CLI's exit 3, a file reader's catch-all) let it through."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Fail (AssertionError, which Hypothesis shrinks) if the block runs over ``seconds``.

    The block is interrupted by SIGALRM at the limit (Python code, and the regular-expression
    engine, check for signals); a C call that never checks is caught when it returns, and if it
    hangs far past the limit, faulthandler prints every thread's stack.
    """
    def alarm(signum: int, frame: object) -> None:
        raise _Overtime()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:  # pytest's captured sys.stderr has no file descriptor; the real one does
        faulthandler.dump_traceback_later(seconds * 4 + 30, file=sys.__stderr__)
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass
    t0 = time.perf_counter()
    try:
        yield
    except _Overtime:
        raise AssertionError(f"{what}: interrupted after {seconds:g} s (the bound for one call)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        faulthandler.cancel_dump_traceback_later()
    took = time.perf_counter() - t0
    assert took <= seconds, f"{what}: took {took:.1f} s, over the bound of {seconds:g} s for one call"


# -- mutated IR text -------------------------------------------------------------------------------
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+|[ \t]+|\r?\n|.",
                    re.S)
_VALUE = re.compile(r"t[0-9]+\Z")
DTYPE_NAMES = [d.value for d in DType]
ATTR_NAMES = sorted({a.name for cls in OPS.values() for a in cls.ATTRS})
KEYWORDS = ["graph", "input", "output", "scalar", "true", "false", "_", "nan", "inf"]

NUMBERS = st.one_of(
    st.sampled_from(["0", "1", "2", "3", "-1", "-0", "+1", "007", "63", "64", "65", "4096", "16777217",
                     "2147483648", "4294967296", "9223372036854775807", "9223372036854775808",
                     "18446744073709551616", "281474976710656", "281474976710657", "1e308", "1e309", "-1e309",
                     "1.0", "0.5", "-2.5", "1e-320", "nan", "inf", "-inf", ".5", "5.", "1e5", "1e", "1.2.3",
                     "9" * 4301, "1" + "0" * 5000, "0" * 5000 + "1", "-" + "9" * 4400, "1e" + "9" * 4400]),
    st.integers(-(2 ** 70), 2 ** 70).map(str),
    st.floats().map(repr),
)
DTYPE_SWAPS = st.sampled_from(DTYPE_NAMES + ["Float16", "float32", "Int8", "UInt8", "Complex64", "String"])
IDENTS = st.one_of(
    DTYPE_SWAPS,
    st.sampled_from(sorted(OPS)),
    st.sampled_from(KEYWORDS + ATTR_NAMES),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
    st.just("a" * 5000),
)
VALUES = st.one_of(st.integers(0, 40).map(lambda k: f"t{k}"),
                   st.sampled_from(["t" + "9" * 4400, "t" + "0" * 30, "t01", "t-1", "t", "T0", "_t0"]))
# one unit of a long run (blanks half the time: hand-aligned files have long runs of them), and how many
# times it is repeated
RUN_UNITS = st.sampled_from([" ", "\t"]) | st.sampled_from([" ", "\t", "0", "9", "1, ", "?, ", "[", "]", "(", ")", ",", ", ", "t0, ", "t0 ",
                             "_, ", "#", "\n", "\r", "\r\n", "\\", '"', "é", "\x00", "\x0c", "\u2028", "a", "=",
                             "[1, ", "(t0", "x=1, ", "Float32 [2], ", "-", ".", "e", "😀"])
RUN_LENGTHS = st.one_of(st.integers(1, 64), st.integers(64, 4096), st.integers(4096, 300_000))
REPEATS = st.one_of(st.integers(2, 50), st.integers(50, 40_000))
SMALL_RUN_LENGTHS = st.integers(1, 200)
SMALL_REPEATS = st.integers(2, 50)
OTHER_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _pick(draw, toks: list[str], ok: Callable[[str], bool]) -> Optional[int]:
    where = [i for i, t in enumerate(toks) if ok(t)]
    return draw(st.sampled_from(where)) if where else None


def _position(draw, toks: list[str]) -> int:
    """Where to insert: any token boundary, or (half the time) next to punctuation, where the
    parser's lists, types and argument lists are."""
    punct = [i for i, t in enumerate(toks) if t in "[](),:=?#"]
    if punct and draw(st.booleans()):
        return draw(st.sampled_from(punct)) + draw(st.integers(0, 1))
    return draw(st.integers(0, len(toks)))


def _delete(draw, toks):
    if not toks:
        return toks
    i = draw(st.integers(0, len(toks) - 1))
    j = i + draw(st.integers(1, 3))
    return toks[:i] + toks[j:]


def _duplicate(draw, toks):
    if not toks:
        return toks
    i = draw(st.integers(0, len(toks) - 1))
    j = min(len(toks), i + draw(st.integers(1, 6)))
    return toks[:j] + toks[i:j] * draw(st.integers(1, 3)) + toks[j:]


def _repeat_segment(draw, toks, large=True):
    """A short stretch of tokens repeated many times: huge operand, result, dim and list counts."""
    if not toks:
        return toks
    i = draw(st.integers(0, len(toks) - 1))
    j = min(len(toks), i + draw(st.integers(1, 4)))
    return toks[:j] + toks[i:j] * draw(REPEATS if large else SMALL_REPEATS) + toks[j:]


def _swap(draw, toks):
    if len(toks) < 2:
        return toks
    i, j = draw(st.integers(0, len(toks) - 1)), draw(st.integers(0, len(toks) - 1))
    toks = list(toks)
    toks[i], toks[j] = toks[j], toks[i]
    return toks


def _replace(draw, toks, ok: Callable[[str], bool], new: st.SearchStrategy):
    i = _pick(draw, toks, ok)
    if i is None:
        return toks
    return toks[:i] + [draw(new)] + toks[i + 1:]


def _number(draw, toks):
    return _replace(draw, toks, lambda t: t[:1].isdigit() or t[:1] == ".", NUMBERS)


def _dtype(draw, toks):
    return _replace(draw, toks, lambda t: t in DTYPE_NAMES, st.one_of(DTYPE_SWAPS, IDENTS))


def _ident(draw, toks):
    return _replace(draw, toks, lambda t: t[:1].isalpha() or t[:1] == "_", IDENTS)


def _value(draw, toks):
    return _replace(draw, toks, lambda t: bool(_VALUE.match(t)), VALUES)


def _truncate(draw, toks):
    text = "".join(toks)
    return tokens(text[:draw(st.integers(0, len(text)))])


def _run(draw, toks, large=True):
    i = _position(draw, toks)
    return toks[:i] + [draw(RUN_UNITS) * draw(RUN_LENGTHS if large else SMALL_RUN_LENGTHS)] + toks[i:]


def _insert_text(draw, toks):
    i = _position(draw, toks)
    return toks[:i] + [draw(st.one_of(OTHER_TEXT, NUMBERS, IDENTS))] + toks[i:]


def _lines(toks: list[str]) -> list[str]:
    return "".join(toks).split("\n")


def _repeat_line(draw, toks, large=True):
    lines = _lines(toks)
    i = draw(st.integers(0, len(lines) - 1))
    lines[i + 1:i + 1] = [lines[i]] * draw(REPEATS if large else SMALL_REPEATS)
    return tokens("\n".join(lines))


def _shuffle_lines(draw, toks):
    lines = _lines(toks)
    i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
    if draw(st.booleans()):
        lines[i], lines[j] = lines[j], lines[i]
    else:
        del lines[i]
    return tokens("\n".join(lines))


MUTATIONS = [_delete, _duplicate, _repeat_segment, _swap, _number, _number, _dtype, _ident, _value, _truncate,
             _run, _run, _insert_text, _repeat_line, _shuffle_lines]
_SIZED = {_repeat_segment, _run, _repeat_line}  # the mutations that take ``large``


def cap(text: str) -> str:
    """``text`` cut to at most ``MAX_FILE`` bytes of UTF-8 (the bound the time limits are for)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_FILE:
        return text
    return data[:MAX_FILE].decode("utf-8", "ignore")


def valid_texts() -> st.SearchStrategy[str]:
    """What mutations start from: a shipped sample, a random valid graph's canonical text, or one
    with comments, blank lines and CRLF line ends drawn around its statements."""
    return st.one_of(st.sampled_from(SAMPLE_TEXTS),
                     graphs(max_ops=4).map(Graph.to_text),
                     graphs(max_ops=3).flatmap(commented_texts).map(lambda pair: pair[0]))


@st.composite
def mutated_texts(draw, base: Optional[st.SearchStrategy[str]] = None, large: bool = True) -> str:
    """A valid text with one to four mutations applied in turn, at most 1 MB (with ``large=False``,
    runs and repeats stay short: a few kB at most)."""
    toks = tokens(draw(base if base is not None else valid_texts()))
    for _ in range(draw(st.integers(1, 4))):
        mutate = draw(st.sampled_from(MUTATIONS))
        toks = mutate(draw, toks, large) if mutate in _SIZED else mutate(draw, toks)
        if sum(len(t) for t in toks) > MAX_FILE:
            break
    return cap("".join(toks))


@st.composite
def mutated_bytes(draw, base: Optional[st.SearchStrategy[str]] = None) -> bytes:
    """``mutated_texts`` as UTF-8, now and then with bytes flipped or invalid UTF-8 / a BOM put in."""
    data = bytearray(draw(mutated_texts(base)).encode("utf-8", "surrogatepass"))
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "insert", "bom"]))
        if kind == "flip" and i < len(data):
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[i:i] = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf",
                                              b"\xe2\x80", b"\r"]))
        else:
            data[0:0] = b"\xef\xbb\xbf"
    return bytes(data[:MAX_FILE])


# -- sizes -------------------------------------------------------------------------------------------
def total_elements(g: Graph) -> int:
    """Elements of every value of a validated graph, a ``?`` dimension counted as 2 (what
    ``demo_inputs`` makes): the size of a run, so that only small graphs are run."""
    n = 0
    for t in g.types.values():
        k = 1
        for d in t.shape:
            k *= 2 if d is None else d
        n += k
    return n


RUN_ELEMENTS = 1 << 18  # graphs up to this many elements are run (a bigger one only takes time and memory)


# -- array files -----------------------------------------------------------------------------------
def npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def npz_bytes(arrays: dict[str, np.ndarray], compressed: bool = False) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


SHAPES = st.sampled_from(["(True, 3)", "(2, 3)", "(3, 2)", "()", "(6,)", "(-1, 3)", "(0, 3)", "(2.5, 3)", "[2, 3]",
                          "'a'", "(2, 3", "(18446744073709551616,)", "(4398046511104,)", "(2, 3, 1)", "None",
                          "(" + "1, " * 70 + ")", "(" + "9" * 5000 + ",)", "(1e400,)", "(2, -3)"])
DESCRS = st.sampled_from(["'<f4'", "'>f4'", "'<f8'", "'<f2'", "'|O'", "'<U3'", "'|S3'", "'|V12'", "'<c8'",
                          "'|b1'", "'<i8'", "'<M8[s]'", "'bogus'", "[('a', '<f4')]", "3", "None", "'<f4", "{}"])
ORDERS = st.sampled_from(["True", "False", "1", "None", "{{{", "'no'"])


def _patch_header(data: bytes, key: str, value: str) -> bytes:
    """An .npy whose header dict has ``key``'s value replaced (the header length adjusted)."""
    if data[6:7] not in (b"\x01", b"\x02", b"\x03"):
        return data
    wide = data[6] != 1
    start = 12 if wide else 10
    hl = int.from_bytes(data[8:start], "little")
    header = data[start:start + hl].decode("latin-1")
    new = re.sub(rf"'{key}': (\([^)]*\)|'[^']*'|\w+|\[[^\]]*\])", lambda m: f"'{key}': {value}", header, count=1)
    raw = new.encode("latin-1", "replace")
    length = len(raw).to_bytes(4 if wide else 2, "little") if len(raw) < (1 << 32 if wide else 1 << 16) else None
    if length is None:
        return data
    return data[:8] + length + raw + data[start + hl:]


@st.composite
def mutated_npy(draw, valid: bytes) -> bytes:
    """``valid`` (an .npy file) with one to three of: a header field replaced, the version or the
    header length changed, bytes flipped/inserted/deleted, a truncation, random bytes appended."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["shape", "descr", "order", "version", "hlen", "flip", "insert", "delete",
                                     "truncate", "append", "header"]))
        head = min(len(data), 128)
        if kind == "shape":
            data = bytearray(_patch_header(bytes(data), "shape", draw(SHAPES)))
        elif kind == "descr":
            data = bytearray(_patch_header(bytes(data), "descr", draw(DESCRS)))
        elif kind == "order":
            data = bytearray(_patch_header(bytes(data), "fortran_order", draw(ORDERS)))
        elif kind == "version" and len(data) >= 8:
            data[6:8] = bytes([draw(st.sampled_from([0, 1, 2, 3, 9, 255])), draw(st.integers(0, 255))])
        elif kind == "hlen" and len(data) >= 10:
            data[8:10] = struct.pack("<H", draw(st.sampled_from([0, 1, 10, 70, 117, 118, 119, 500, 65535])))
        elif kind == "flip" and data:
            i = draw(st.integers(0, head - 1 if draw(st.booleans()) else len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        elif kind == "insert":
            i = draw(st.integers(0, len(data)))
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and data:
            i = draw(st.integers(0, len(data) - 1))
            del data[i:i + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del data[draw(st.integers(0, len(data))):]
        elif kind == "append":
            data += draw(st.binary(min_size=1, max_size=64))
        elif kind == "header":
            data = bytearray(b"\x93NUMPY\x01\x00" + struct.pack("<H", 0) + draw(st.binary(max_size=64)))
            data[8:10] = struct.pack("<H", max(0, len(data) - 10))
    return bytes(data)


# zip fields as (offset from a header's signature, size in bytes) and values worth trying
_LOCAL = {"version": (4, 2), "flags": (6, 2), "method": (8, 2), "crc": (14, 4), "csize": (18, 4), "usize": (22, 4),
          "namelen": (26, 2), "extralen": (28, 2)}
_CENTRAL = {"version": (6, 2), "flags": (8, 2), "method": (10, 2), "crc": (16, 4), "csize": (20, 4),
            "usize": (24, 4), "namelen": (28, 2), "extralen": (30, 2), "commentlen": (32, 2), "offset": (42, 4)}
_END = {"disk_entries": (8, 2), "entries": (10, 2), "cd_size": (12, 4), "cd_offset": (16, 4), "commentlen": (20, 2)}
_FIELD_VALUES = st.one_of(st.sampled_from([0, 1, 8, 9, 12, 14, 20, 45, 63, 77, 99, 0xFFFF, 0xFFFFFFFF, 2 ** 31]),
                          st.integers(0, 0xFFFFFFFF))


def _patch_zip(data: bytearray, where: bytes, fields: dict, field: str, value: int) -> None:
    i = data.find(where)
    if i < 0 or field not in fields:
        return
    off, size = fields[field]
    if i + off + size <= len(data):
        data[i + off:i + off + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


@st.composite
def mutated_npz(draw, arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz of ``arrays`` (stored or deflated) with one to three of: a zip field of a local or
    central header or of the end record changed, a member .npy mutated (``mutated_npy``), members
    renamed, added or dropped, bytes flipped, a truncation."""
    members = {f"{k}.npy": npy_bytes(a) for k, a in arrays.items()}
    method = draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))
    kind = draw(st.sampled_from(["member", "names", "fields", "fields", "bytes"]))
    if kind == "member":
        name = draw(st.sampled_from(sorted(members)))
        members[name] = draw(mutated_npy(members[name]))
    elif kind == "names":
        name = draw(st.sampled_from(sorted(members)))
        new = draw(st.sampled_from(["t0", "t0.npy/", "../t0.npy", "/t0.npy", "t9.npy", "t0.npy.npy", ".npy",
                                    "é.npy", "t0\x00.npy", "a" * 300 + ".npy"]))
        data = members.pop(name)
        if draw(st.booleans()):
            members[new] = data
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    out = bytearray(buf.getvalue())
    if kind in ("fields", "member") and draw(st.booleans()):
        for _ in range(draw(st.integers(1, 3))):
            part = draw(st.sampled_from(["local", "central", "end"]))
            if part == "local":
                _patch_zip(out, b"PK\x03\x04", _LOCAL, draw(st.sampled_from(sorted(_LOCAL))), draw(_FIELD_VALUES))
            elif part == "central":
                _patch_zip(out, b"PK\x01\x02", _CENTRAL, draw(st.sampled_from(sorted(_CENTRAL))),
                           draw(_FIELD_VALUES))
            else:
                _patch_zip(out, b"PK\x05\x06", _END, draw(st.sampled_from(sorted(_END))), draw(_FIELD_VALUES))
    if kind == "bytes" or draw(st.integers(0, 5)) == 0:
        for _ in range(draw(st.integers(1, 4))):
            if not out:
                break
            i = draw(st.integers(0, len(out) - 1))
            out[i] = draw(st.integers(0, 255))
    if draw(st.integers(0, 5)) == 0:
        del out[draw(st.integers(0, len(out))):]
    return bytes(out)


# -- junk values for the API -----------------------------------------------------------------------
ARRAY_DTYPES = st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.bool_, np.float16, np.complex64,
                                np.uint8, np.int8, np.dtype(">f4"), np.dtype("<U3"), np.dtype("S3"),
                                np.dtype("datetime64[s]"), np.dtype([("a", "<f4")])])
ARRAYS = hnp.arrays(ARRAY_DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))


class CallersError(Exception):
    """Raised by ``_Weird``'s methods: the caller's own code failing, which may pass through gradir."""


class _Weird:
    """An object whose every protocol method fails: gradir may let that failure through (it is the
    caller's), but must not fail in any other way because of it."""

    def __len__(self) -> int:
        raise CallersError("no len")

    def __iter__(self):
        raise CallersError("no iter")

    def __index__(self) -> int:
        raise CallersError("no index")

    def __fspath__(self) -> str:
        raise CallersError("no fspath")

    def __str__(self) -> str:
        raise CallersError("no str")


_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from([2 ** 70, -(2 ** 70), 0, -1, 1024, 1025]),
    st.builds(lambda: 10 ** 5000),  # built, not listed: a strategy's repr would need its str
    st.floats(), st.complex_numbers(), st.text(max_size=12), st.binary(max_size=12),
    st.sampled_from([object(), _Weird(), Path("/nonexistent/g.gir"), Path("."), np.float32(1.5), np.int64(3),
                     np.array(2.0), np.bool_(True), float("nan"), ..., NotImplemented, type, len, "t0", "t0,t1",
                     "Float32", "", "\x00", "cse", "dce", "cse,dce", "t" + "9" * 4400]),
    ARRAYS,
)
junk = st.recursive(_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=3), inner, max_size=3),
    st.frozensets(st.one_of(st.integers(), st.text(max_size=3)), max_size=3)), max_leaves=8)
