"""Writing output files: device nodes and FIFOs are written through, never replaced; new files get
the mode ``open()`` would give; temporary files are gradir's by name and removed on SIGTERM and
Ctrl-C; ``-o -`` is standard output; Ctrl-C during start-up is not a traceback.  ``.npz`` archives
keep every key as it is (or refuse it before writing); ``gradir import`` writes its graph and weights
both or neither; shard files are inputs."""

from __future__ import annotations

import io
import os
import pathlib
import signal
import stat
import subprocess
import sys
import threading

import numpy as np
import pytest

from gradir import fileio
from gradir.arrayfiles import MAX_MEMBER_NAME, npz_bytes, read_npz, write_npz
from gradir.cli.main import main
from gradir.errors import InputError
import gradir

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLE = str(ROOT / "samples" / "gelu_grads.gir")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def gradir_cmd(*args: str, **kw) -> subprocess.CompletedProcess:
    exe = os.path.join(os.path.dirname(sys.executable), "gradir")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "gradir.cli.main"]
    if "stdout" not in kw:
        kw["capture_output"] = True
    return subprocess.run(cmd + list(args), cwd=ROOT, **kw)


@pytest.mark.skipif(not IS_ROOT, reason="creating a device node needs root (CI runs as root)")
@pytest.mark.parametrize("option", ["-o", "--trace"])
def test_a_device_node_is_written_through_not_replaced(tmp_path, option):
    null = tmp_path / "null"  # this test's own copy of /dev/null, never the real one
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    r = gradir_cmd("run", SAMPLE, option, str(null))
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.stat(null).st_mode), "the device node was replaced by a regular file"
    assert sorted(os.listdir(tmp_path)) == ["null"]


@pytest.mark.skipif(not IS_ROOT, reason="creating a device node needs root (CI runs as root)")
def test_grad_and_fmt_write_through_a_device_node(tmp_path):
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    for argv in (["grad", str(ROOT / "samples" / "mlp_forward.gir"), "-o", str(null)],
                 ["fmt", SAMPLE, "-o", str(null)],
                 ["run", SAMPLE, "-o", str(null), "--trace", str(null)]):
        assert main(argv) == 0
        assert stat.S_ISCHR(os.stat(null).st_mode)


def test_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = {}

    def reader():
        with open(fifo, "rb") as f:
            got["data"] = f.read()
    t = threading.Thread(target=reader)
    t.start()
    fileio.write_file(str(fifo), b"abc\n")
    t.join(10)
    assert got["data"] == b"abc\n"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="needs /dev/stdout")
@pytest.mark.parametrize("command", ["run", "fmt"])
def test_o_dev_stdout_writes_through_a_pipe(command):
    """`gradir run g.gir -o /dev/stdout | cat` exited 1 (`cannot write file`): the real path of /dev/stdout
    is `pipe:[...]`, which was taken for a new regular file; the pipe itself must be written."""
    r = gradir_cmd(command, SAMPLE, "-o", "/dev/stdout")  # stdout=PIPE: a real pipe
    assert r.returncode == 0, r.stderr
    assert b"error" not in r.stderr
    if command == "run":
        with np.load(io.BytesIO(r.stdout)) as z:
            assert z.files == ["t2", "t3", "t4", "t5"]
    else:
        assert r.stdout.startswith(b"# The three GELU") and b"graph gelu_backward" in r.stdout


def test_new_files_respect_the_umask_and_existing_files_keep_their_mode(tmp_path):
    old = os.umask(0o027)
    try:
        fileio.write_file(str(tmp_path / "new"), b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o640
    existing = tmp_path / "existing"
    existing.write_bytes(b"old")
    os.chmod(existing, 0o604)
    fileio.write_file(str(existing), b"new")
    assert existing.read_bytes() == b"new" and stat.S_IMODE(os.stat(existing).st_mode) == 0o604


def test_a_symlink_is_followed_and_kept(tmp_path):
    target = tmp_path / "target.txt"
    target.write_bytes(b"old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    fileio.write_file(str(link), b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"


def test_a_directory_is_a_clear_error(tmp_path):
    with pytest.raises(fileio.GradirError, match="cannot write file: Is a directory"):
        fileio.write_file(str(tmp_path), b"x")


def test_dash_writes_to_standard_output(capsysbinary):
    assert main(["run", SAMPLE, "-o", "-"]) == 0
    cap = capsysbinary.readouterr()
    with np.load(io.BytesIO(cap.out)) as z:
        assert z.files == ["t2", "t3", "t4", "t5"]
    assert b"wrote 4 outputs to -" in cap.err and b"L2 norm" in cap.err


def test_temporary_files_are_named_for_gradir_and_removed_on_sigterm(tmp_path):
    """A child process writes a large file slowly; SIGTERM in the middle leaves no temporary file
    and the old content in place."""
    target = tmp_path / "out.bin"
    target.write_bytes(b"old content")
    script = f"""
import os, sys, time
from gradir import fileio
from gradir.arrayfiles import MAX_MEMBER_NAME, npz_bytes, read_npz, write_npz
from gradir.cli.main import main
from gradir.errors import InputError
fileio.terminate_cleanly()
real = os.fsync
def slow_fsync(fd):
    print("writing", flush=True)
    time.sleep(30)
    real(fd)
os.fsync = slow_fsync
try:
    fileio.write_file({str(target)!r}, b"x" * 1000000)
except fileio.Terminated:
    sys.exit(143)
"""
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "writing"
    tmps = [n for n in os.listdir(tmp_path) if n != "out.bin"]
    assert len(tmps) == 1 and tmps[0].startswith(".gradir-out.bin-") and tmps[0].endswith(".tmp")
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 143
    assert os.listdir(tmp_path) == ["out.bin"] and target.read_bytes() == b"old content"


def test_the_cli_exits_143_on_sigterm(tmp_path):
    script = ("import os, signal, sys, threading\n"
              "from gradir.cli.main import main\n"
              "import gradir.cli.run as r\n"
              "orig = r.cmd_run\n"
              "def slow(args):\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    return orig(args)\n"
              "r.cmd_run = slow\n"
              "import gradir.cli.main as c\n"
              f"sys.exit(main(['run', {SAMPLE!r}]))\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 143 and "gradir: terminated" in p.stderr and "Traceback" not in p.stderr


def test_ctrl_c_while_importing_is_not_a_traceback():
    """The console script's entry point imports gradir inside its try."""
    script = ("import builtins, sys\n"
              "real = builtins.__import__\n"
              "def imp(name, *a, **k):\n"
              "    if name == 'numpy' or name.startswith('numpy.'):\n"
              "        raise KeyboardInterrupt\n"
              "    return real(name, *a, **k)\n"
              "builtins.__import__ = imp\n"
              "import gradir_entry\n"
              "sys.exit(gradir_entry.main())\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 130
    assert p.stderr == "gradir: interrupted\n"


_AT_EVENT = """
import os, sys, time
fd, event, target = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def hook(name, args, _done=[]):
    if name == event and not _done and str(args[0]) == target:
        _done.append(1)
        os.write(fd, b"1")
        time.sleep(60)  # the parent's SIGINT lands here, as CPython's KeyboardInterrupt
sys.addaudithook(hook)
sys.argv = ["gradir", "check", sys.argv[4]]
import gradir_entry
sys.exit(gradir_entry.main())
"""


@pytest.mark.parametrize("event, target, code", [
    ("import", "numpy", 130),       # while the entry point imports gradir (NumPy, numba, SciPy)
    ("open", SAMPLE, 130),          # once gradir.cli.main runs: opening the user's file
])
def test_a_real_ctrl_c_during_start_up(event, target, code):
    """A real SIGINT sent to the process while it starts up: no traceback, exit 130.  The child
    tells the parent (through a pipe, from an audit hook) when it has reached the moment, and waits
    there for the signal: the moment is the same under any load, unlike a delay."""
    r, w = os.pipe()
    try:
        p = subprocess.Popen([sys.executable, "-c", _AT_EVENT, str(w), event, target, SAMPLE], pass_fds=(w,),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        os.close(w)
        w = -1
        assert os.read(r, 1) == b"1"  # blocks until the child is there (EOF if it never gets there)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert "Traceback" not in err, err
    assert (p.returncode, err) == (code, "gradir: interrupted\n")


# -- .npz archives: one writer, every key stored as it is (issue #29, item 1) ---------------------------

KEYWORD_GRAPH = """graph keywords
input t0 "allow_pickle" : Float32 [2]
input t1 "file" : Float32 [2]
input t2 "fix_imports" : Float32 [2]
t3 = Add(t0, t1) : Float32 [2]
t4 = Mul(t1, t2) : Float32 [2]
t5 = Sub(t0, t2) : Float32 [2]
output t3 "allow_pickle2", t4 "file2", t5 "a/b é"
"""


def test_npz_keys_named_like_numpy_keywords_survive_run_o_and_save_inputs(tmp_path):
    """np.savez(buf, **arrays) took a key `allow_pickle` for its own keyword (the array dropped, "wrote 2
    outputs") and a key `file` for its first parameter (exit 3)."""
    g = tmp_path / "k.gir"
    g.write_text(KEYWORD_GRAPH.replace('"allow_pickle2", t4 "file2"', '"allow_pickle", t4 "file"').replace(
        'input t0 "allow_pickle"', 'input t0 "x"').replace('input t1 "file"', 'input t1 "y"'))
    out, ins = tmp_path / "out.npz", tmp_path / "in.npz"
    r = gradir_cmd("run", str(g), "-o", str(out), "--save-inputs", str(ins))
    assert r.returncode == 0, r.stderr
    assert b"wrote 3 outputs" in r.stdout
    assert list(read_npz(str(out), "t")) == ["allow_pickle", "file", "a/b é"]
    g.write_text(KEYWORD_GRAPH)
    r = gradir_cmd("run", str(g), "-o", str(out), "--save-inputs", str(ins))
    assert r.returncode == 0, r.stderr
    assert list(read_npz(str(ins), "t")) == ["allow_pickle", "file", "fix_imports"]
    with np.load(ins) as z:  # NumPy's own reader finds them too
        assert sorted(z.files) == ["allow_pickle", "file", "fix_imports"]
    r2 = gradir_cmd("run", str(g), "--inputs", str(ins), "--compare", str(out))  # the saved inputs give the outputs
    assert r2.returncode == 0, r2.stderr


def test_npz_writer_round_trips_every_key_dtype_and_shape(tmp_path):
    arrays = {"allow_pickle": np.arange(3), "file": np.array(2.5, np.float32), "fix_imports": np.zeros((0, 2)),
              "max_header_size": np.array([1, 2], ">i4"), "a/b": np.ones((2, 1, 2), ">f8"), "/lead": np.ones(1),
              "..": np.zeros(1, bool), "é😀": np.arange(4, dtype=np.uint8).reshape(2, 2), "": np.ones(1),
              "x.npy.npy": np.zeros(1), "back\\slash": np.ones(1), "k" * (MAX_MEMBER_NAME - 4): np.ones(1)}
    path = str(tmp_path / "all.npz")
    write_npz(path, arrays)
    got = read_npz(path, "test")
    assert list(got) == list(arrays)
    for k, a in arrays.items():
        assert got[k].dtype == a.dtype and got[k].shape == a.shape and np.array_equal(got[k], a), k
    assert npz_bytes(arrays, path, "t") == npz_bytes(arrays, path, "t")  # no timestamps: the same bytes


@pytest.mark.parametrize("keys, message", [
    (["k" * (MAX_MEMBER_NAME - 3)], r"a zip member name \(KEY.npy\) holds at most 65535 bytes"),
    (["é" * 40000], "80000 bytes of UTF-8"),
    (["a\0b"], "contains NUL"),
    (["\ud800"], "not valid Unicode text"),
    (["x", "x.npy"], "would be one array to np.load"),
])
def test_npz_writer_refuses_a_key_that_cannot_be_a_member_before_writing(tmp_path, keys, message):
    path = tmp_path / "o.npz"
    with pytest.raises(InputError, match=message) as e:
        write_npz(str(path), {k: np.ones(1) for k in keys})
    assert str(path) in e.value.render()
    assert not path.exists() and os.listdir(tmp_path) == []


def test_read_npz_reads_a_key_ending_in_npy_as_itself(tmp_path):
    """np.load's lookup gives the member x.npy for the key 'x.npy' when x.npy.npy is there too."""
    import zipfile
    path = tmp_path / "both.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x.npy", npz_member(np.zeros(1)))
        zf.writestr("x.npy.npy", npz_member(np.ones(1)))
    got = read_npz(str(path), "--inputs")
    assert got["x"][0] == 0 and got["x.npy"][0] == 1
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("x", npz_member(np.ones(1)))
    with pytest.raises(InputError, match="two members are the array 'x'"):
        read_npz(str(path), "--inputs")


def npz_member(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def test_run_refuses_a_label_too_long_for_an_npz_before_running(tmp_path):
    label = "y" * 70000
    g = tmp_path / "long.gir"
    g.write_text(f'graph long\ninput t0 : Float32 [2]\nt1 = Neg(t0) : Float32 [2]\noutput t1 "{label}"\n')
    out = tmp_path / "out.npz"
    r = gradir_cmd("run", str(g), "-o", str(out))
    assert r.returncode == 1, r.stderr
    assert b"cannot write outputs: the key 'yyyy" in r.stderr and b"Traceback" not in r.stderr
    assert b"L2 norm" not in r.stdout + r.stderr  # refused before the run
    assert not out.exists()


# -- gradir import: the graph and its weights file, both checked, both written or neither (items 1, 2) ---
def _keyword_model(path):
    onnx = pytest.importorskip("onnx")
    import onnx_models as M
    inits = {"allow_pickle": np.eye(3, dtype=np.float32), "file": np.full(3, 2, np.float32)}
    nodes = [M.h.make_node("MatMul", ["x", "allow_pickle"], ["y"]), M.h.make_node("Add", ["y", "file"], ["z"])]
    onnx.save(M.make(nodes, [M.vi("x", [2, 3])], [M.vi("z", [2, 3])], inits), str(path))
    return inits


def test_import_writes_initializers_named_like_numpy_keywords(tmp_path):
    inits = _keyword_model(tmp_path / "m.onnx")
    assert main(["import", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.gir")]) == 0
    got = read_npz(str(tmp_path / "m.inputs.npz"), "t")
    assert sorted(got) == ["allow_pickle", "file"]
    assert all(np.array_equal(got[k], a) for k, a in inits.items())
    np.savez(tmp_path / "x.npz", x=np.ones((2, 3), np.float32))
    out = tmp_path / "out.npz"
    assert main(["run", str(tmp_path / "m.gir"), "--inputs", str(tmp_path / "x.npz"), "--inputs",
                 str(tmp_path / "m.inputs.npz"), "-o", str(out)]) == 0  # every weight given: none generated
    with np.load(out) as z:
        assert np.array_equal(z["z"], np.ones((2, 3), np.float32) @ inits["allow_pickle"] + 2)


def test_import_refuses_a_weights_file_that_is_the_model(tmp_path, capsys):
    """`gradir import w.inputs.npz -o w.gir` would have replaced the model with its weights."""
    _keyword_model(tmp_path / "w.inputs.npz")
    before = (tmp_path / "w.inputs.npz").read_bytes()
    assert main(["import", str(tmp_path / "w.inputs.npz"), "-o", str(tmp_path / "w.gir")]) == 1
    err = capsys.readouterr().err
    assert "weights file" in err and "same file as MODEL" in err
    assert (tmp_path / "w.inputs.npz").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["w.inputs.npz"]


def test_import_refuses_a_weights_file_that_is_a_directory_before_writing_the_graph(tmp_path, capsys):
    _keyword_model(tmp_path / "m.onnx")
    (tmp_path / "m.inputs.npz").mkdir()
    assert main(["import", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.gir")]) == 1
    assert "m.inputs.npz is a directory" in capsys.readouterr().err
    assert not (tmp_path / "m.gir").exists()


@pytest.mark.skipif(not IS_ROOT, reason="creating a device node needs root (CI runs as root)")
def test_import_to_a_device_makes_no_weights_file_beside_it(tmp_path, capsys):
    _keyword_model(tmp_path / "m.onnx")
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    assert main(["import", str(tmp_path / "m.onnx"), "-o", str(null)]) == 0
    assert "no weights file is written beside it" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "null"]


def test_import_to_dev_stdout_redirected_to_a_file_makes_no_weights_file_under_dev(tmp_path):
    """`gradir import m.onnx -o /dev/stdout > out.gir` wrote /dev/stdout.inputs.npz (as root): /dev/stdout
    leads to a regular file, but no weights file may be named after a path under /dev or /proc."""
    _keyword_model(tmp_path / "m.onnx")
    out = tmp_path / "out.gir"
    with open(out, "wb") as f:
        r = gradir_cmd("import", str(tmp_path / "m.onnx"), "-o", "/dev/stdout", stdout=f, stderr=subprocess.PIPE)
    try:
        assert r.returncode == 0, r.stderr
        assert b"no weights file is written beside it" in r.stderr and b"--values" in r.stderr
        assert b"graph " in out.read_bytes() and b"MatMul" in out.read_bytes()
        assert sorted(os.listdir(tmp_path)) == ["m.onnx", "out.gir"]
    finally:
        for stray in ("/dev/stdout.inputs.npz", "/dev/fd/1.inputs.npz", "/proc/self/fd/1.inputs.npz"):
            assert not os.path.lexists(stray)


@pytest.mark.parametrize("path", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1", "/dev/null", "/dev/new.gir"])
def test_no_file_is_put_beside_a_path_under_dev_or_proc(path):
    assert not fileio.can_have_a_file_beside(path)


def test_a_file_may_be_put_beside_a_regular_or_new_file(tmp_path):
    (tmp_path / "old.gir").write_text("x")
    assert fileio.can_have_a_file_beside(str(tmp_path / "old.gir")) and fileio.can_have_a_file_beside(str(tmp_path / "new.gir"))
    assert not fileio.can_have_a_file_beside(str(tmp_path))


def test_import_writes_the_graph_and_its_weights_both_or_neither(tmp_path, monkeypatch):
    """When the weights cannot be put in place, the graph is not left behind without them: a new .gir is
    removed, an old one gets its old content back."""
    _keyword_model(tmp_path / "m.onnx")
    gir = tmp_path / "m.gir"
    real_replace = os.replace

    def failing_replace(src, dst, *a, **k):
        if str(dst).endswith(".inputs.npz"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst, *a, **k)
    monkeypatch.setattr(os, "replace", failing_replace)
    assert main(["import", str(tmp_path / "m.onnx"), "-o", str(gir)]) == 1
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
    gir.write_text("old graph")
    (tmp_path / "m.inputs.npz").write_bytes(b"old weights")
    assert main(["import", str(tmp_path / "m.onnx"), "-o", str(gir)]) == 1
    assert gir.read_text() == "old graph" and (tmp_path / "m.inputs.npz").read_bytes() == b"old weights"
    assert sorted(os.listdir(tmp_path)) == ["m.gir", "m.inputs.npz", "m.onnx"]
    monkeypatch.setattr(os, "replace", real_replace)
    assert main(["import", str(tmp_path / "m.onnx"), "-o", str(gir)]) == 0
    assert gir.read_text().startswith("graph") and read_npz(str(tmp_path / "m.inputs.npz"), "t")


# -- shard files are inputs (issue #29, item 3) ----------------------------------------------------------
SHARDED = str(ROOT / "samples" / "mlp_forward.grad.gir")  # t0 and t11 "cotangent(t10)" split along axis 0
SPLIT = ["--shard", "t0:0,t11:0"]


def _shard_files(tmp_path) -> dict:
    """The sample's inputs from seed 5: two shard files of the split ones, rest.npz of the others."""
    from gradir import load
    from gradir.cli.run import demo_inputs
    from gradir.ir.labels import keyed_by_label
    x = keyed_by_label(load(SHARDED), demo_inputs(load(SHARDED), 5))
    split = ("t0", "cotangent(t10)")
    for k in range(2):
        write_npz(str(tmp_path / f"shard-{k}.npz"), {n: np.array_split(x[n], 2)[k] for n in split})
    write_npz(str(tmp_path / "rest.npz"), {n: a for n, a in x.items() if n not in split})
    write_npz(str(tmp_path / "all.npz"), x)
    return x


def test_an_output_may_not_replace_a_shard_file(tmp_path, capsys):
    _shard_files(tmp_path)
    before = (tmp_path / "shard-0.npz").read_bytes()
    for option in ("-o", "--save-inputs", "--trace"):
        assert main(["run", SHARDED, *SPLIT, "--shard-files", str(tmp_path / "shard-*.npz"), "--inputs",
                     str(tmp_path / "rest.npz"), option, str(tmp_path / "shard-0.npz")]) == 1
        assert "is the same file as --shard-files" in capsys.readouterr().err
    assert (tmp_path / "shard-0.npz").read_bytes() == before


def test_save_inputs_with_shard_files_saves_what_the_run_used(tmp_path, capsys):
    """It saved generated arrays the run never used: a rerun from them gave other outputs."""
    x = _shard_files(tmp_path)
    files = ["--shard-files", str(tmp_path / "shard-*.npz")]
    saved, out = str(tmp_path / "saved.npz"), str(tmp_path / "out.npz")
    for given in ([], ["--inputs", str(tmp_path / "rest.npz")]):  # replicated inputs generated, or given
        assert main(["run", SHARDED, *SPLIT, *files, *given, "--save-inputs", saved, "-o", out]) == 0
        assert "wrote 6 inputs" in capsys.readouterr().out
        got = read_npz(saved, "t")
        for n in ("t0", "cotangent(t10)"):
            assert np.array_equal(got[n], x[n]), n
        assert main(["run", SHARDED, "--inputs", saved, "--compare", out]) == 0  # the same run, unsharded
    assert all(np.array_equal(got[n], a) for n, a in x.items())


def test_a_split_input_in_both_inputs_and_shard_files_is_refused(tmp_path, capsys):
    _shard_files(tmp_path)
    assert main(["run", SHARDED, *SPLIT, "--shard-files", str(tmp_path / "shard-*.npz"), "--inputs",
                 str(tmp_path / "all.npz")]) == 1
    err = capsys.readouterr().err
    assert 'all.npz: error: t0, t11 "cotangent(t10)": split by --shard and read from the shard files' in err


def test_an_output_that_is_a_directory_is_refused_before_the_run(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    assert main(["run", SAMPLE, "-o", str(tmp_path / "d")]) == 1
    cap = capsys.readouterr()
    assert f"{tmp_path / 'd'}: error: -o {tmp_path / 'd'} is a directory; name a file" in cap.err
    assert "L2 norm" not in cap.out  # before the run, not after it


MLP = ROOT / "samples" / "mlp_forward.gir"


@pytest.fixture
def graph_file(tmp_path):
    p = tmp_path / "g.gir"
    p.write_bytes(MLP.read_bytes())
    return p


@pytest.mark.parametrize("argv", [
    ["run", "{g}", "-o", "{g}"],
    ["run", "{g}", "--trace", "{g}"],
    ["run", "{link}", "-o", "{g}"],          # through a symbolic link
    ["run", "{g}", "--trace", "{hard}"],     # a hard link is the same file too
    ["grad", "{g}", "-o", "{g}"],
    ["grad", "{g}", "-o", "{dotted}"],
    ["fmt", "{g}", "-o", "{link}"],
])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(graph_file, tmp_path, capsys, argv):
    link = tmp_path / "link.gir"
    link.symlink_to(graph_file)
    hard = tmp_path / "hard.gir"
    os.link(graph_file, hard)
    before = graph_file.read_bytes()
    names = {"g": str(graph_file), "link": str(link), "hard": str(hard),
             "dotted": str(tmp_path / "." / "g.gir")}
    assert main([a.format(**names) for a in argv]) == 1
    err = capsys.readouterr().err
    assert "is the same file as FILE" in err and "refusing to overwrite an input" in err
    assert graph_file.read_bytes() == before
    assert "Traceback" not in err


def test_an_input_array_file_is_not_overwritten(graph_file, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **{i.name: np.zeros(i.type.shape, np.float32) for i in gradir.load(graph_file).inputs})
    before = inputs.read_bytes()
    assert main(["run", str(graph_file), "--inputs", str(inputs), "-o", str(inputs)]) == 1
    assert "-o " + str(inputs) + " is the same file as --inputs" in capsys.readouterr().err
    assert inputs.read_bytes() == before


def test_two_outputs_on_one_path_are_refused(graph_file, tmp_path, capsys):
    out = tmp_path / "o.npz"
    assert main(["run", str(graph_file), "-o", str(out), "--trace", str(out)]) == 1
    assert "--trace" in capsys.readouterr().err and not out.exists()


def test_distinct_outputs_still_work(graph_file, tmp_path):
    assert main(["run", str(graph_file), "-o", str(tmp_path / "o.npz"), "--trace", str(tmp_path / "t.json")]) == 0
    assert (tmp_path / "o.npz").exists() and (tmp_path / "t.json").exists()
