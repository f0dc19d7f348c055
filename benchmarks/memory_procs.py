"""The processes of ``bench_memory.py``: each configuration (gradir with or without a budget, PyTorch eager,
checkpointed or compiled) runs in its own process, started by a ``Child`` and answering its commands on
stdin (``measure``: one step's resident peak; ``save PATH``: that step's outputs; ``time``: one timed step;
``quit``).  ``Session`` starts them one at a time and times them in alternating rounds.  See
``bench_memory.py``'s docstring for how memory and time are measured.

    python benchmarks/memory_procs.py SPEC_JSON     (the child; the parent starts it)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IDLE_GAP = 0.15  # seconds of idling before each timed step (thread pools of the step before stop spinning)


# ---------------------------------------------------------------------------------------------
# the child: one configuration in its own process, answering the parent's commands on stdin

def _status(key: str) -> int:
    """``key`` (VmRSS, VmHWM) of this process, in bytes."""
    with open("/proc/self/status") as f:
        m = re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) * 1024 if m else 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current VmRSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def _malloc_for_timing() -> None:
    """glibc's thresholds as its dynamic ones end up after a few large frees (mmap 32 MiB, trim 64 MiB): the
    measured step ran with every large block its own mapping (``MALLOC_MMAP_THRESHOLD_``), which would
    charge PyTorch's timed steps a page fault per fresh page of each new tensor that glibc otherwise reuses
    from its heap (gradir's buffers come from its pool either way)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def _reply(**kw: Any) -> None:
    print("@@" + json.dumps(kw), flush=True)


def _gradir_step(spec: dict, case: Any) -> tuple[Any, dict]:
    import gradir
    import numpy as np
    try:  # the planner's solver (scipy's HiGHS, ~20 MiB) in every gradir process, budgeted or not: the
        import scipy.optimize  # noqa: F401  runtime's own memory (the sequence-2 baseline) then includes it
    except ImportError:
        pass
    vals = case.make_inputs()
    fwd = gradir.parse(case.text)
    bwd = gradir.grad(fwd, wrt=case.wrt)
    feeds = dict(vals)
    for inp in bwd.inputs[len(fwd.inputs):]:  # the scalar loss's cotangent
        feeds[inp.name] = np.ones(inp.type.shape, np.float32)
    exe = compile_budgeted(bwd, spec["threads"], spec.get("budget"))
    if isinstance(exe, str):
        return None, {"error": exe}
    if spec.get("warm"):  # one run first (kernels built on first use), then a fresh Executable: an empty pool
        exe.run(feeds)
        exe = compile_budgeted(bwd, spec["threads"], spec.get("budget"))
    return (lambda: list(exe.run(feeds).values())), {"planned_peak": exe.plan.peak_bytes}


def compile_budgeted(graph: Any, threads: int, budget: Optional[int]) -> Any:
    """``gradir.compile(graph, threads, memory_budget=budget)``, or the planner's error as a string."""
    import gradir
    if budget is None:
        return gradir.compile(graph, threads=threads)
    try:
        return gradir.compile(graph, threads=threads, memory_budget=budget)
    except TypeError as e:
        if "memory_budget" in str(e):
            return f"gradir.compile takes no memory_budget in this version ({e})"
        raise
    except gradir.GradirError as e:
        return f"{type(e).__name__}: {e}"


def _torch_step(spec: dict, case: Any) -> tuple[Any, dict]:
    import torch
    torch.set_num_threads(spec["threads"])
    step = case.torch(torch, case.make_inputs(), spec["impl"])
    if spec["impl"] == "compile":  # the partitioner reads the budget when the first call compiles
        with torch._functorch.config.patch(activation_memory_budget=spec["compile_budget"]):
            step()
    else:
        step()
    return (lambda: [g.detach().numpy() for g in step()]), {"torch": torch.__version__}


def child(spec: dict) -> int:
    if spec["impl"] == "gradir":
        import gradir  # noqa: F401  (before NumPy, as the gradir command does: gradir._blasenv)
    import numpy as np
    import memory_cases as mc
    case = mc.build(spec["case"], spec["scale"], spec.get("with_dx", False), spec.get("seq"))
    try:
        step, info = (_gradir_step if spec["impl"] == "gradir" else _torch_step)(spec, case)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which goes on without this row
        step, info = None, {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
    gc.collect()
    _reply(ready=step is not None, **info)
    last: Optional[list] = None
    timing = False
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "measure":
            life = _status("VmHWM")
            gc.collect()
            before = _status("VmRSS")
            reset = _reset_peak()
            last = step()
            hwm = _status("VmHWM")
            _reply(rss_before=before, hwm_step=hwm, hwm_life=max(life, hwm), reset=reset)
        elif cmd == "save":
            np.savez(arg, *[np.asarray(a) for a in last or []])
            last = None
            _reply(saved=True)
        elif cmd == "time":
            if not timing:
                _malloc_for_timing()
                timing = True
            t0 = time.perf_counter()
            out = step()
            dt = time.perf_counter() - t0
            del out
            _reply(seconds=dt)
        else:
            break
    return 0


# ---------------------------------------------------------------------------------------------
# the parent's side of a child

class Child:
    """One configuration's process; ``info`` is its first answer (``ready``, ``planned_peak`` or ``error``)."""

    def __init__(self, name: str, spec: dict, logdir: str) -> None:
        self.name = name
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="131072",
                   TORCHINDUCTOR_COMPILE_THREADS="1",
                   PYTHONPATH=os.pathsep.join([ROOT, HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        self.log = open(os.path.join(logdir, re.sub(r"\W+", "_", name) + ".log"), "w+")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=env)
        self.info = self._read()

    @property
    def ok(self) -> bool:
        return bool(self.info.get("ready"))

    def _read(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        self.proc.wait()
        self.log.seek(0)
        tail = [ln for ln in self.log.read().splitlines() if ln.strip()][-3:]
        return {"error": f"the process exited with {self.proc.returncode}: {' | '.join(tail)[-400:]}"}

    def ask(self, cmd: str) -> dict:
        if self.proc.poll() is not None:
            return {"error": "the process is gone"}
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Session:
    """The children of one case: started one at a time (each measured while the others idle), timed in
    alternating rounds, closed together."""

    def __init__(self, args: argparse.Namespace, logdir: str) -> None:
        self.args, self.logdir = args, logdir
        self.children: dict[str, Child] = {}
        self.rows: dict[str, dict] = {}

    def start(self, name: str, **spec: Any) -> Optional[dict]:
        """Start ``name``, measure one step, save its outputs; its row (or None: the error is printed)."""
        spec.setdefault("threads", self.args.threads)
        spec.setdefault("scale", self.args.scale)
        t0 = time.perf_counter()
        c = Child(name, spec, self.logdir)
        if not c.ok:
            print(f"   {name}: {c.info.get('error', 'failed')}")
            c.close()
            return None
        m = c.ask("measure")
        path = os.path.join(self.logdir, re.sub(r"\W+", "_", name) + ".npz")
        saved = c.ask("save " + path)
        if "error" in m or "error" in saved:
            print(f"   {name}: {m.get('error') or saved.get('error')}")
            c.close()
            return None
        import numpy as np
        with np.load(path) as z:
            outs = [z[f"arr_{i}"] for i in range(len(z.files))]
        os.unlink(path)
        self.children[name] = c
        row = dict(c.info, **m, outputs=outs, step_peak=m["hwm_step"] - m["rss_before"],
                   startup=time.perf_counter() - t0)
        self.rows[name] = row
        planned = f"planned {row['planned_peak'] / 2**20:.1f} MiB, " if row.get("planned_peak") else ""
        print(f"   {name}: {planned}one step's peak {row['step_peak'] / 2**20:.1f} MiB above "
              f"{m['rss_before'] / 2**20:.1f} MiB resident before it, the process's peak "
              f"{m['hwm_life'] / 2**20:.1f} MiB (started and measured in {row['startup']:.0f} s)", flush=True)
        return row

    def time_all(self, repeats: int) -> None:
        """Median seconds (and min, max) of a step of every started child, in alternating rounds."""
        times: dict[str, list[float]] = {k: [] for k in self.children}
        for r in range(repeats + 1):  # round 0 warms up
            for k, c in self.children.items():
                time.sleep(IDLE_GAP)
                ans = c.ask("time")
                if r and "seconds" in ans:
                    times[k].append(ans["seconds"])
        for k, v in times.items():
            if v:
                self.rows[k].update(median=statistics.median(v), lo=min(v), hi=max(v))

    def close(self) -> None:
        for c in self.children.values():
            c.close()



if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    sys.exit(child(json.loads(sys.argv[1])))
