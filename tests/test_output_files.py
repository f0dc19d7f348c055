"""Writing output files: device nodes and FIFOs are written through, never replaced; new files get
the mode ``open()`` would give; temporary files are gradir's by name and removed on SIGTERM and
Ctrl-C; ``-o -`` is standard output; Ctrl-C during start-up is not a traceback."""

from __future__ import annotations

import io
import os
import pathlib
import signal
import stat
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from gradir import fileio
from gradir.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLE = str(ROOT / "samples" / "gelu_grads.gir")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def gradir_cmd(*args: str, **kw) -> subprocess.CompletedProcess:
    exe = os.path.join(os.path.dirname(sys.executable), "gradir")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "gradir.cli"]
    return subprocess.run(cmd + list(args), capture_output=True, cwd=ROOT, **kw)


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
from gradir.cli import main
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
              "from gradir.cli import main\n"
              "import gradir.runcli as r\n"
              "orig = r.cmd_run\n"
              "def slow(args):\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    return orig(args)\n"
              "r.cmd_run = slow\n"
              "import gradir.cli as c\n"
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
    ("open", SAMPLE, 130),          # once gradir.cli runs: opening the user's file
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
