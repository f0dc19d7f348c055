"""The fuzzing harness: bad input of every kind, through the API and the command line.

Each property says what gradir promises for *any* input:

- the API lets only ``gradir.GradirError`` escape, and each call ends within ``API_SECONDS``;
- a command exits 0, 1 or 2 (never 3, "internal error"), prints no traceback, says something when
  it fails, and ends within ``CLI_SECONDS`` (20 s) for a file under 1 MB;
- a text that parses prints (``to_text``, ``gradir fmt``) to a text that parses to the same graph
  and prints the same again; the regular-expression fast path reads a line as lark does.

The inputs are the shipped samples and random valid graphs (``strategies.graphs``) mutated token
by token, random bytes and characters, mutated ``.npy``/``.npz`` files, random command lines and
random Python values as API arguments (generators: ``tests/fuzzing.py``).

Budget: ``GRADIR_FUZZ_BUDGET`` is a number of seconds for the whole file.  Unset (or 0), each
property runs a small fixed number of examples (the file takes ~15 s), derandomized, so that
every run draws the same examples and takes the same time.  With a budget, each property runs rounds of
random examples until its share of the budget is spent (shares below; a round in progress is
finished, so the total overruns by a few seconds), on numba's compiled kernels (warmed first);
without one, on the NumPy kernels, since a cold numba cache takes a minute to fill.  So
``GRADIR_FUZZ_BUDGET=600 python -m pytest tests/test_fuzz.py`` fuzzes for about ten minutes.
A failure is shrunk and printed with a ``@reproduce_failure`` blob; docs/fuzzing.md has more.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import gradir
from gradir.cli.main import main
from gradir.cli.run import demo_inputs
from fuzzing import kernels  # noqa: F401 - the module's kernels (fixture)
from fuzzing import (API_SECONDS, BUDGET, CLI_SECONDS, REPO, RUN_ELEMENTS, SAMPLE_TEXTS, CallersError, campaign,
                     examples, fuzz_settings, junk, mutated_bytes, mutated_npy, mutated_npz, mutated_texts,
                     npy_bytes, npz_bytes, time_limit, total_elements)
from test_syntax import _same




# -- helpers ---------------------------------------------------------------------------------------
def attempt(what: str, fn: Callable[[], Any], seconds: float = API_SECONDS) -> Any:
    """``fn()`` within ``seconds``; ``None`` if it raised a ``GradirError`` (anything else fails)."""
    with time_limit(seconds, what):
        try:
            return fn()
        except gradir.GradirError:
            return None


def parsed(text: Union[str, bytes]) -> Optional[gradir.Graph]:
    return attempt("parse", lambda: gradir.parse(text))


# What a crash prints, at the start of a line (a user's text is echoed indented, so it cannot fake one).
TRACEBACK = re.compile(r"^Traceback \(most recent call last\):$", re.M)
INTERNAL = re.compile(r"^gradir: internal error: ", re.M)


def crashed(stderr: str) -> bool:
    return bool(TRACEBACK.search(stderr) or INTERNAL.search(stderr))


def cli(argv: list[Any], *, codes: tuple[int, ...] = (0, 1, 2)) -> tuple[int, str, str]:
    """``gradir ARGV`` in this process: (exit code, stdout, stderr), checked for what every command
    promises: an exit code in ``codes``, no traceback, no internal error, a message when it fails."""
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            time_limit(CLI_SECONDS, "gradir " + " ".join(a[:40] for a in argv[:4])):
        rc = main(argv)
    o, e = out.getvalue(), err.getvalue()
    assert not crashed(e) and not TRACEBACK.search(o), e[-2000:]
    assert rc in codes, (rc, e[-2000:])
    assert rc == 0 or e.strip(), f"gradir {argv[0]} exited {rc} and said nothing"
    return rc, o, e


def small(g: gradir.Graph) -> bool:
    return total_elements(g) <= RUN_ELEMENTS


# -- 1. mutated text through the API --------------------------------------------------------------
def check_api(text: Union[str, bytes], seed: int = 0) -> Optional[gradir.Graph]:
    """Everything the API does with a text; returns the graph when the text is valid IR."""
    g = parsed(text)
    if g is None:
        return None
    with time_limit(API_SECONDS, "to_text and parse again"):
        canon = g.to_text()
        again = gradir.parse(canon)  # accepted text prints to accepted text: no GradirError allowed
        assert again == g, canon[:2000]
        assert again.to_text() == canon, "fmt is not idempotent"
    d = attempt("grad", lambda: gradir.grad(g))
    if d is not None:
        with time_limit(API_SECONDS, "the derived graph's text"):
            assert gradir.parse(d.to_text()) == d
    attempt("to_dot", lambda: gradir.to_dot(g))
    attempt("to_dot(plan=True)", lambda: gradir.to_dot(g, plan=True))
    for graph in (g, d):
        if graph is None or not small(graph):
            continue
        exe = attempt("compile", lambda: gradir.compile(graph, threads=1 + seed % 2))
        if exe is not None:
            inputs = demo_inputs(graph, seed)
            attempt("run", lambda: exe.run(inputs))
            attempt("run(check_numerics=True)", lambda: exe.run(inputs, check_numerics=True))
    return g


@fuzz_settings(examples(40))
@given(mutated_bytes() | mutated_texts(), st.integers(0, 3))
def _api_mutated(text: Union[str, bytes], seed: int) -> None:
    check_api(text, seed)


def test_mutated_text_through_the_api():
    campaign(_api_mutated, 0.25)


@fuzz_settings(examples(25))
@given(mutated_texts(large=False))  # lark reads ~7,000 lines/s: big texts would only slow this down
def _fast_path_agrees(text: str) -> None:
    from gradir.text.syntax import _statements
    with time_limit(API_SECONDS, "both parsers"):
        fast, slow = _statements(text), _statements(text, fast=False)
    assert len(fast.errors) == len(slow.errors) and fast.more_errors == slow.more_errors
    assert [d.render() for d in fast.errors] == [d.render() for d in slow.errors]
    assert fast.rows == slow.rows and _same(fast.stmts, slow.stmts)


def test_the_fast_path_reads_mutated_text_as_lark_does():
    campaign(_fast_path_agrees, 0.08)


# -- 2. mutated text through the command line ------------------------------------------------------
def check_cli(data: bytes, tmp: Path, seed: int) -> None:
    """Every command on one file; each agrees with the API on whether the file is valid."""
    f = tmp / "g.gir"
    f.write_bytes(data)
    g = parsed(data)
    bad = 1 if g is None else 0
    assert cli(["check", f])[0] == bad
    rc, out, _ = cli(["fmt", f])
    assert rc == bad and (g is None or out == g.to_text())
    assert cli(["fmt", "--check", f])[0] == (1 if g is None or out.encode() != data else 0)
    cli(["plan", f], codes=(0, 1) if g else (1,))
    rc, _, _ = cli(["grad", f, "-o", tmp / "b.gir"], codes=(0, 1) if g else (1,))
    if rc == 0:
        assert cli(["check", tmp / "b.gir"])[0] == 0
    cli(["dot", f], codes=(0, 1) if g else (1,))
    cli(["dot", "--plan", f, "-o", tmp / "g.dot"], codes=(0, 1) if g else (1,))
    if g is not None and small(g):
        threads = str(1 + seed % 2)
        rc, _, _ = cli(["run", f, "--seed", seed, "--save-inputs", tmp / "in.npz", "-o", tmp / "out.npz",
                        "--threads", threads], codes=(0, 1))
        if rc == 0:  # the same inputs give the same outputs, bit for bit, on any thread count
            cli(["run", f, "--inputs", tmp / "in.npz", "--compare", tmp / "out.npz", "--rtol", "0", "--atol", "0",
                 "--threads", "3" if threads == "1" else "1"], codes=(0,))
        if total_elements(g) <= 4096 and len(g.ops) <= 12:
            cli(["gradcheck", f, "--directions", "1", "--seed", seed], codes=(0, 1))
    elif g is None:
        cli(["run", f], codes=(1,))


@fuzz_settings(examples(12))
@given(mutated_bytes(), st.integers(0, 3))
def _cli_mutated(data: bytes, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_cli(data, Path(tmp), seed)


def test_mutated_text_through_the_cli():
    campaign(_cli_mutated, 0.22)


def _subprocess(argv: list[str], stdin: bytes = b"", cwd: Optional[str] = None) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    if not BUDGET:
        env["GRADIR_JIT"] = "0"
    with time_limit(CLI_SECONDS + 5, "gradir " + " ".join(argv[:3])):  # + 5 s: the interpreter's start
        r = subprocess.run([sys.executable, "-m", "gradir.cli.main", *argv], input=stdin, capture_output=True,
                           cwd=cwd, env=env, timeout=CLI_SECONDS * 3)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode in (0, 1, 2) and not crashed(err), (r.returncode, err[-2000:])
    return r.returncode, err


@fuzz_settings(examples(2))
@given(mutated_bytes())
def _real_process(data: bytes) -> None:
    """A real process: standard input, the console encoding, writes to /dev/null and /dev/full."""
    g = parsed(data)
    bad = 1 if g is None else 0
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "g.gir").write_bytes(data)
        assert _subprocess(["check", "-"], stdin=data)[0] == bad
        assert _subprocess(["fmt", "g.gir", "-o", "/dev/null"], cwd=tmp)[0] == bad
        rc, err = _subprocess(["fmt", "g.gir", "-o", "/dev/full"], cwd=tmp)
        assert rc == 1 and (bad or "/dev/full" in err), err
        if g is not None and small(g):
            assert _subprocess(["run", "-", "-o", "/dev/null"], stdin=data)[0] in (0, 1)


def test_mutated_text_through_a_real_process():
    campaign(_real_process, 0.05)


def _limit_memory() -> None:  # pragma: no cover - runs in the child
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


MEMORY_LIMIT = 2 << 30  # bytes of address space for a child reading an endless device (gradir needs ~0.5)


@pytest.mark.parametrize("command", [["check"], ["fmt"], ["run"], ["run", "g.gir", "--inputs"]], ids=" ".join)
def test_endless_devices_as_input_files(tmp_path, command):
    """A character device that never ends (/dev/zero) given as an input file is refused, not read
    until memory runs out (without the child's memory limit, the kernel's OOM killer ends it, or the
    machine).  Not in the random command lines for that reason."""
    Path(tmp_path, "g.gir").write_text(SMALL_GIR)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), GRADIR_JIT="0")
    with time_limit(CLI_SECONDS + 5, "gradir " + " ".join(command)):
        r = subprocess.run([sys.executable, "-m", "gradir.cli.main", *command, "/dev/zero"], capture_output=True,
                           cwd=tmp_path, env=env, timeout=CLI_SECONDS * 3, preexec_fn=_limit_memory)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode in (1, 2) and not crashed(err) and "/dev/zero" in err, (r.returncode, err[-2000:])
    assert "out of memory" not in err, err[-2000:]


# -- 3. random bytes and characters ----------------------------------------------------------------
IR_WORDS = ["input ", "output ", "graph ", "t0", "t1", "t2", " : ", "Float32", "Int64", "Float64", " [", "]", ", ",
            " = ", "(", ")", "\n", " ", "Relu", "Add", "MatMul", "LSTMGrad", "Sum", "?", "scalar", "_", "1", "2",
            "-", ".", "e", '"', "axis=", "perm=[", "hidden_size=", "#", "\r\n", "\t", "true", "nan"]
RANDOM_FILES = st.one_of(
    st.binary(max_size=3000),
    st.text(max_size=800).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.lists(st.sampled_from(IR_WORDS), max_size=120).map(lambda w: "".join(w).encode()),
)


@fuzz_settings(examples(40))
@given(RANDOM_FILES)
def _random_files(data: bytes) -> None:
    g = check_api(data)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp, "g.gir")
        f.write_bytes(data)
        assert cli(["check", f])[0] == (0 if g else 1)
        rc, out, _ = cli(["fmt", f])
        assert rc == (0 if g else 1) and (g is None or out == g.to_text())


def test_random_bytes_and_characters_as_ir_files():
    campaign(_random_files, 0.08)


# -- 4. malformed .npy and .npz files --------------------------------------------------------------
IO_GIR = ("input t0 : Float32 [2, 3]\ninput t1 : Int64 [3]\nt2 = Relu(t0)\nt3 = Neg(t1)\nt4 = ReduceSum(t2)\n"
          "output t4, t3\n")
VALID_INPUTS = {"t0": (np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5), "t1": np.arange(3, dtype=np.int64)}
VALID_OUTPUTS = {"t4": np.array(4.5, np.float32), "t3": -np.arange(3, dtype=np.int64)}


@fuzz_settings(examples(25))
@given(st.sampled_from(["inputs", "input", "compare", "gradcheck"]), st.data())
def _array_files(option: str, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "g.gir").write_text(IO_GIR)
        (t / "in.npz").write_bytes(npz_bytes(VALID_INPUTS))
        (t / "t1.npy").write_bytes(npy_bytes(VALID_INPUTS["t1"]))
        if option == "input":
            bad = data.draw(mutated_npy(npy_bytes(VALID_INPUTS["t0"])), "t0.npy")
            argv = ["run", t / "g.gir", "--input", f"t0={t / 'bad'}", "--input", f"t1={t / 't1.npy'}"]
        elif option == "compare":
            bad = data.draw(mutated_npz(VALID_OUTPUTS), "reference .npz")
            argv = ["run", t / "g.gir", "--inputs", t / "in.npz", "--compare", t / "bad"]
        else:
            bad = data.draw(mutated_npz(VALID_INPUTS), "inputs .npz")
            argv = ["run" if option == "inputs" else "gradcheck", t / "g.gir", "--inputs", t / "bad"]
        (t / "bad").write_bytes(bad)
        rc, out, err = cli(argv, codes=(0, 1))
        assert rc == 0 or str(t) in err, err  # the error names the file it is about (or the graph)


def test_malformed_array_files_through_run_and_gradcheck():
    campaign(_array_files, 0.14)


def test_the_array_file_mutations_start_from_files_that_work(tmp_path):
    """The valid files the mutations start from do run and compare clean: a failure of the
    property above is the mutation's doing."""
    (tmp_path / "g.gir").write_text(IO_GIR)
    (tmp_path / "in.npz").write_bytes(npz_bytes(VALID_INPUTS))
    (tmp_path / "out.npz").write_bytes(npz_bytes(VALID_OUTPUTS))
    (tmp_path / "t0.npy").write_bytes(npy_bytes(VALID_INPUTS["t0"]))
    (tmp_path / "t1.npy").write_bytes(npy_bytes(VALID_INPUTS["t1"]))
    g = tmp_path / "g.gir"
    assert cli(["run", g, "--inputs", tmp_path / "in.npz", "--compare", tmp_path / "out.npz"])[0] == 0
    assert cli(["run", g, "--input", f"t0={tmp_path / 't0.npy'}", "--input", f"t1={tmp_path / 't1.npy'}",
                "--compare", tmp_path / "out.npz"])[0] == 0
    assert cli(["gradcheck", g, "--inputs", tmp_path / "in.npz"])[0] == 0


# -- 5. random values as API arguments -------------------------------------------------------------
SMALL_GIR = "graph g\ninput t0 : Float32 [2, 3]\ninput t1 : Float32 [3]\nt2 = Add(t0, t1)\nt3 = Tanh(t2)\noutput t3\n"
SMALL_GRAPH = gradir.parse(SMALL_GIR)
SMALL_EXE = gradir.compile(SMALL_GIR, threads=1)
CALLS = ["parse", "load", "compile", "run", "call", "grad", "to_dot", "gradcheck", "builder", "graph", "op",
         "types"]
small_ints = st.one_of(st.integers(-2, 4), st.sampled_from([10 ** 6, 2 ** 64]), junk)
# a count of work (gradcheck's directions): a large one is a long run on purpose, not a fault
counts = st.one_of(st.integers(-2, 4), junk.filter(lambda v: not isinstance(v, int) or isinstance(v, bool)))
array_like = st.one_of(junk, st.just(VALID_INPUTS["t0"]), st.lists(st.lists(st.floats(), max_size=3), max_size=3),
                       st.lists(st.one_of(st.floats(), st.lists(st.floats(), max_size=2)), max_size=3))


def _kwargs(draw: Callable, **strategies: st.SearchStrategy) -> dict:
    """Some of the keyword arguments, each drawn from its strategy."""
    return {k: draw(s) for k, s in strategies.items() if draw(st.booleans())}


def _api_call(which: str, draw: Callable) -> Callable[[], Any]:
    g = draw(st.one_of(st.just(SMALL_GRAPH), st.just(SMALL_GIR), junk))
    if which == "parse":
        return lambda: gradir.parse(draw(st.one_of(junk, st.just(SMALL_GIR))), **_kwargs(draw, filename=junk,
                                                                                            verify=junk))
    if which == "load":
        path = draw(st.one_of(junk.filter(lambda v: not (isinstance(v, str) and v == "-")), st.just(REPO / "samples"), st.just("/dev/null")))
        return lambda: gradir.load(path, **_kwargs(draw, verify=junk))
    if which == "compile":
        return lambda: gradir.compile(g, **_kwargs(draw, threads=small_ints, passes=junk, disable=junk,
                                                   filename=junk))
    if which == "run":
        inputs = draw(st.one_of(junk, st.dictionaries(st.sampled_from(["t0", "t1", "t2", "x"]), array_like)))
        return lambda: SMALL_EXE.run(inputs, **_kwargs(draw, check_numerics=junk, trace=junk))
    if which == "call":
        inputs = draw(st.dictionaries(st.sampled_from(["t0", "t1", "t9"]), array_like))
        return lambda: SMALL_EXE(**inputs)
    if which == "grad":
        return lambda: gradir.grad(g, **_kwargs(draw, wrt=junk))
    if which == "to_dot":
        return lambda: gradir.to_dot(g, **_kwargs(draw, plan=junk, disable=junk))
    if which == "gradcheck":
        return lambda: gradir.gradcheck(g, **_kwargs(
            draw, wrt=junk, seed=small_ints, inputs=junk, generate_missing=junk, backward=junk,
            directions=counts, rtol=junk, atol=junk, threads=small_ints))
    if which == "builder":
        def build() -> Any:
            b = gradir.GraphBuilder(draw(junk))
            x = b.input(draw(st.one_of(junk, st.just("Float32"))), draw(st.one_of(junk, st.just([2, 3]))))
            op = draw(st.one_of(st.sampled_from(sorted(gradir.OPS)), junk))
            y = b.apply(op, *draw(st.lists(st.one_of(st.just(x), junk), max_size=3)),
                        **draw(st.dictionaries(st.sampled_from(["axis", "alpha", "perm", "shape", "hidden_size"]),
                                               junk, max_size=2)))
            b.output(draw(st.one_of(st.just(y), junk)))
            return b.build().to_text()
        return build
    if which == "graph":
        return lambda: gradir.Graph(draw(junk), draw(junk), draw(junk), draw(junk)).validate().to_text()
    if which == "op":
        def op() -> Any:
            cls = gradir.OPS[draw(st.sampled_from(sorted(gradir.OPS)))]
            o = cls(draw(junk), draw(junk), draw(junk))
            return gradir.Graph([("t0", gradir.TensorType("Float32", [2, 3]))], [o], draw(junk)).validate().to_text()
        return op
    return lambda: str(gradir.TensorType(draw(junk), draw(junk)))


@fuzz_settings(examples(60))
@given(st.sampled_from(CALLS), st.data())
def _api_junk(which: str, data: st.DataObject) -> None:
    call = _api_call(which, data.draw)
    try:
        attempt(which, call)
    except CallersError:  # a failure of the caller's own object, passed through: not gradir's
        pass


def test_random_values_as_api_arguments():
    campaign(_api_junk, 0.12)


# -- 6. random command lines -----------------------------------------------------------------------
OPTIONS = {
    "check": ["-q"], "fmt": ["-i", "-o", "--check"], "plan": ["--disable", "--list-passes", "--threads"],
    "grad": ["--wrt", "-o"], "dot": ["-o", "--plan", "--disable", "--svg"],
    "run": ["--inputs", "--input", "-o", "--threads", "--seed", "--repeat", "--trace", "--check-numerics",
            "--disable", "--save-inputs", "--generate-missing", "--compare", "--rtol", "--atol"],
    "gradcheck": ["--wrt", "--seed", "--inputs", "--input", "--generate-missing", "--backward", "--directions",
                  "--rtol", "--atol", "--threads"],
    "ops": ["--markdown", "Relu", "Relux"],
}
ARG_VALUES = st.one_of(
    st.sampled_from(["g.gir", "other.gir", "missing.gir", "in.npz", "out.npz", "t0.npy", "dir", "/dev/null",
                     "/dev/full", "-", "0", "1", "2", "-1", "1e999", "nan", "inf", "9" * 5000, "t0", "t0,t1", "t0,",
                     ",", "t0=t0.npy", "t0=", "=t0.npy", "t9=t0.npy", "cse", "dce,cse", "nope", "", " ", "é",
                     "--", "-x", "3"]),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8))


OUTPUT_FLAGS = {"-o", "--trace", "--save-inputs", "--svg", "--png"}
ENDLESS = {"/dev/zero", "/dev/full", "/dev/urandom"}  # character devices that never end


@st.composite
def command_lines(draw) -> list[str]:
    cmd = draw(st.sampled_from(sorted(OPTIONS)))
    argv = [cmd] + ([] if cmd == "ops" else [draw(st.sampled_from(["g.gir", "other.gir", "missing.gir", "dir"]))])
    for _ in range(draw(st.integers(0, 5))):
        argv.append(draw(st.sampled_from(OPTIONS[cmd] + ["--traceback-not", "--help", "-q"])))
        if draw(st.booleans()):
            argv.append(draw(ARG_VALUES))
    if draw(st.booleans()):
        argv = draw(st.permutations(argv))
    return argv


@contextlib.contextmanager
def _chdir(path: str):
    """``contextlib.chdir`` (Python 3.11) for 3.10."""
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@fuzz_settings(examples(25))
@given(command_lines())
def _command_lines(argv: list[str]) -> None:
    note(f"gradir {' '.join(argv)}")
    if "-" in argv:  # standard input is pytest's here (reading it fails); the real-process test reads it
        return
    outputs = {v for k, v in zip(argv, argv[1:]) if k in OUTPUT_FLAGS}
    if any(a in ENDLESS and a not in outputs for a in argv):
        return  # read, an endless device fills memory: test_endless_devices_as_input_files, with a limit
    repeat = [v for k, v in zip(argv, argv[1:]) if k in ("--repeat", "--directions")]
    if any(v.strip().isdigit() and int(v) > 5 for v in repeat if len(v) < 20):
        return  # a long run on purpose is not a fault
    with tempfile.TemporaryDirectory() as tmp, _chdir(tmp):
        Path("g.gir").write_text(SMALL_GIR)
        Path("other.gir").write_text(IO_GIR)
        Path("dir").mkdir()
        Path("in.npz").write_bytes(npz_bytes({"t0": VALID_INPUTS["t0"], "t1": np.zeros(3, np.float32)}))
        Path("t0.npy").write_bytes(npy_bytes(VALID_INPUTS["t0"]))
        Path("out.npz").write_bytes(npz_bytes(VALID_OUTPUTS))
        cli(argv)
        assert Path("g.gir").read_text() == SMALL_GIR or "-i" in argv or "g.gir" in outputs, "an input was overwritten"


def test_random_command_lines():
    campaign(_command_lines, 0.06)


# -- the harness itself ----------------------------------------------------------------------------
def test_the_samples_pass_the_properties_unmutated(tmp_path):
    """Every sample goes through the API and every command with no complaint (a property that
    failed on valid input would say nothing about bad input)."""
    for k, text in enumerate(SAMPLE_TEXTS):
        assert check_api(text) is not None
        check_cli(text.encode(), tmp_path, k)


def test_time_limit_interrupts_a_runaway_regular_expression():
    from complexity import cpu_seconds

    def runaway() -> None:
        with pytest.raises(AssertionError, match="interrupted after 0.2 s"):
            with time_limit(0.2, "regex"):
                re.fullmatch(r"(a*)*b", "a" * 40)  # exponential backtracking: ages, unless interrupted
    assert cpu_seconds(runaway) < 2  # this process's CPU time: not stretched by other processes' load


def test_the_mutations_reach_the_known_fault_classes():
    """The generators can make what earlier campaigns found: long runs, >4300-digit numbers,
    huge repeat counts, swapped dtypes, truncation (each seen in a few hundred draws)."""
    seen = {"run": False, "digits": False, "repeat": False, "dtype": False, "truncated": False}
    base = "input t0 : Float32 [2, 3]\nt1 = Relu(t0) : Float32 [2, 3]\noutput t1\n"

    @fuzz_settings(1500)
    @given(mutated_texts(st.just(base)))
    def look(text: str) -> None:
        seen["run"] |= max(len(line) for line in text.split("\n")) > 5000
        seen["digits"] |= "9" * 4301 in text or "0" * 4301 in text
        seen["repeat"] |= text.count("\n") > 200
        seen["dtype"] |= bool(re.search(r"\b(Float64|Int32|Int64|Bool|Float16)\b", text))
        seen["truncated"] |= len(text) < len(base) and base.startswith(text)
    look()
    assert all(seen.values()), seen
