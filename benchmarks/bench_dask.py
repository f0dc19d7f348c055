"""Data-parallel gradients on Dask: one process against ``local:2``, the overheads, a scaling model.

    python benchmarks/bench_dask.py            # LSTM LM at S=100, B=256, I=H=256, C=512, and a small size
    python benchmarks/bench_dask.py --quick    # S=25, B=128, I=H=128, C=256 (shards of ~100 ms or less)

The graph is the LSTM language model of the [fusion] issue (``LSTMTraining`` -> ``MatMul`` to C
classes -> ``LogSoftmax``), derived by ``gradir.grad`` and sharded along the batch (X axis 1, the
cotangent axis 2): dX is split, every weight gradient a partial sum.  Timed, medians of --repeat runs:

* one process, 1 thread and 2 threads (the unsharded graph);
* ``local:2``: a Dask LocalCluster of 2 worker processes (1 thread each), K=2 shards, gradir adding
  the partial sums; its first run (workers compile the shard graph) is not timed;
* the control: the two half-batch shards in two plain processes side by side (no Dask, nothing
  shipped): on a machine whose second core is busy with other work, local:2 cannot beat it.

Measured in the same run, on the same cluster: the cost of one task (a no-op round trip, and the
per-task cost of many in flight), of shipping a byte to a worker and back, and of adding one byte of
partial sums.  A scaling model calibrated on those numbers and on the time a shard computes on a
worker predicts the local:2 time (printed beside the measurement, term by term) and projects to N
machines:

    T(N) = tasks + in_bytes(N)/bw_in + compute(B/N) + out_bytes(N)/bw_out + (N-1) * partial_bytes/add_rate

compute(b) is linear in the rows b (calibrated: a shard of B/2 rows on a local:2 worker).

strong scaling (the global batch fixed) and weak scaling (the batch per machine fixed), with the
inputs shipped from the client or, with ``files=``, loaded by each task (in_bytes then only the
replicated weights).  It is a model: it ignores the scheduler's own limits, the network's topology
and stragglers; on this 2-core machine shared with other jobs, every number here is noisy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import gradir  # noqa: E402
from gradir.distributed.run import open_scheduler, tree_sum  # noqa: E402

F32 = np.float32


def lm_text(S: int, B: int, I: int, H: int, C: int) -> str:
    return (f"graph lstm_lm\ninput t0 : Float32 [{S}, {B}, {I}]\ninput t1 : Float32 [1, {4 * H}, {I}]\n"
            f"input t2 : Float32 [1, {4 * H}, {H}]\ninput t3 : Float32 [1, {8 * H}]\ninput t4 : Float32 [{H}, {C}]\n"
            f"t5, t6, t7, t8, t9 = LSTMTraining(t0, t1, t2, t3, hidden_size={H})\nt10 = MatMul(t5, t4)\n"
            f"t11 = LogSoftmax(t10)\noutput t11\n")


def lm_inputs(S: int, B: int, I: int, H: int, C: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    u = 1.0 / np.sqrt(H)
    return {"t0": rng.standard_normal((S, B, I), dtype=F32),
            "t1": rng.uniform(-u, u, (1, 4 * H, I)).astype(F32), "t2": rng.uniform(-u, u, (1, 4 * H, H)).astype(F32),
            "t3": rng.uniform(-u, u, (1, 8 * H)).astype(F32),
            "t4": (rng.standard_normal((H, C), dtype=F32) / F32(np.sqrt(H))).astype(F32),
            "cotangent(t11)": rng.standard_normal((S, 1, B, C), dtype=F32)}


def median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


# -- the overhead probes (defined in __main__: Dask ships them to the workers by value) --------------
def noop(x: int) -> int:
    return x


def nbytes_of(a: np.ndarray) -> int:
    return int(a.nbytes)


def make_array(n: int) -> np.ndarray:
    return np.ones(n // 4, dtype=F32)


def time_shard(text: str, part: dict, repeat: int, barrier) -> list[float]:
    """In a plain process (no Dask): compile the shard graph, then time ``repeat`` runs on ``part``, the
    first started together with the other process (``barrier``)."""
    exe = gradir.compile(gradir.parse(text), threads=1)
    exe.run(part)
    barrier.wait()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        exe.run(part)
        out.append(time.perf_counter() - t0)
    return out


def two_processes(sharded, inputs: dict, repeat: int) -> float:
    """The control: both halves of the batch in two plain processes side by side (no Dask, nothing
    shipped per run), the median of the slower one: what this machine gives two processes now."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    parts = sharded.split_inputs(inputs, 2)
    ctx = mp.get_context("spawn")
    with ctx.Manager() as m, ProcessPoolExecutor(2, mp_context=ctx) as pool:
        barrier = m.Barrier(2)
        futs = [pool.submit(time_shard, sharded.text, part, repeat, barrier) for part in parts]
        times = [f.result() for f in futs]
    return max(statistics.median(t) for t in times)


def ship(client, arr: np.ndarray) -> int:
    """What a shard's inputs go through: scattered to a worker (straight to it on local:N), then a task
    reading them."""
    [fut] = client.scatter([arr], hash=False)
    n = client.submit(nbytes_of, fut, pure=False).result()
    fut.release()
    return n


def overheads(client, repeat: int) -> dict[str, float]:
    """Per task (one round trip; many in flight), per byte each way, per byte of partial sums added."""
    from distributed import wait
    client.submit(noop, 0, pure=False).result()
    rt, _ = median_time(lambda: client.submit(noop, 1, pure=False).result(), max(repeat, 5))
    n = 200
    many, _ = median_time(lambda: wait([client.submit(noop, k, pure=False) for k in range(n)]), 3)
    size = 16 << 20
    arr = np.ones(size // 4, dtype=F32)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        send, _ = median_time(lambda: ship(client, arr), 7)
    back, _ = median_time(lambda: client.submit(make_array, size, pure=False).result(), 7)
    parts = [np.ones(size // 4, dtype=F32) for _ in range(2)]
    add, _ = median_time(lambda: tree_sum(parts), 5)
    return {"round_trip": rt, "per_task": many / n, "bw_in": size / max(send - rt, 1e-6),
            "bw_out": size / max(back - rt, 1e-6), "add_rate": size / add}


def _ms(ts: list[float]) -> str:
    return " ".join(f"{t * 1e3:.0f}" for t in ts)


def nbytes(d) -> int:
    return sum(int(np.asarray(v).nbytes) for v in d.values())


def model_terms(o: dict, shard2: float, sharded, inputs: dict, outputs: dict, N: int, scale: float = 1.0,
                files: bool = False) -> dict[str, float]:
    """The terms of the predicted wall time on N machines (one shard each) for the batch ``scale`` times
    the measured one; ``shard2``: the compute time of one shard of half the measured batch (calibrated on
    the local:2 run's workers), taken as linear in the rows."""
    from gradir.ir.labels import inputs_by_name
    byname = inputs_by_name(sharded.graph, inputs)
    split_in = sum(byname[n].nbytes for n in sharded.batch)
    repl_in = nbytes(inputs) - split_in
    keys = dict(zip(sharded.output_keys, sharded.graph.outputs))
    part_out = sum(v.nbytes for k, v in outputs.items() if sharded.placements[keys[k]].is_partial)
    split_out = nbytes(outputs) - part_out
    in_bytes = N * repl_in + (0 if files else split_in * scale)
    out_bytes = N * part_out + split_out * scale
    return {"tasks": o["round_trip"] + N * o["per_task"], "ship in": in_bytes / o["bw_in"],
            "compute": shard2 * 2 * scale / N, "ship out": out_bytes / o["bw_out"],
            "sums": (N - 1) * part_out / o["add_rate"]}


def model(*args, **kw) -> float:
    return sum(model_terms(*args, **kw).values())


def compare(sharded, ref: dict, out: dict) -> str:
    keys = dict(zip(sharded.output_keys, sharded.graph.outputs))
    worst_split, worst_rel = True, 0.0
    for k, r in ref.items():
        if sharded.placements[keys[k]].is_partial:
            worst_rel = max(worst_rel, float(np.abs(out[k] - r).max() / max(np.abs(r).max(), 1e-30)))
        else:
            worst_split &= bool(np.array_equal(out[k], r))
    return f"split outputs {'bit-identical' if worst_split else 'DIFFER'}, partial sums max rel err {worst_rel:.1e}"


def bench(size: tuple, client, repeat: int, o: dict) -> None:
    S, B, I, H, C = size
    print(f"\n== LSTM LM S={S} B={B} I={I} H={H} C={C}: LSTMTraining -> MatMul -> LogSoftmax, derived ==")
    dg = gradir.grad(gradir.parse(lm_text(*size)))
    sharded = gradir.shard(dg, batch={"t0": 1, "cotangent(t11)": 2})
    inputs = lm_inputs(*size)
    exe1, exe2 = gradir.compile(dg, threads=1), gradir.compile(dg, threads=2)
    exe1.run(inputs)
    exe2.run(inputs)
    sharded.run(inputs, shards=2, client=client)  # the workers compile the shard graph
    # the same inputs as one .npz per shard (the split ones) on local disk: each task loads its own
    tmp = tempfile.mkdtemp(prefix="gradir-bench-dask-")
    for k, part in enumerate(sharded.split_inputs(inputs, 2)):
        np.savez(os.path.join(tmp, f"shard{k}.npz"), **{n: part[n] for n in sharded.batch})
    from gradir.ir.labels import inputs_by_name
    replicated = {n: a for n, a in inputs_by_name(sharded.graph, inputs).items() if n not in sharded.batch}
    pattern = os.path.join(tmp, "shard*.npz")
    # interleaved, one of each per round: a load that drifts (a shared machine) hits all alike
    times: dict[str, list[float]] = {"1": [], "2": [], "dask": [], "files": []}
    shard_times: list[float] = []
    ref = out = None
    try:
        for _ in range(repeat):
            for key, fn in (("1", lambda: exe1.run(inputs)), ("2", lambda: exe2.run(inputs)),
                            ("dask", lambda: sharded.run(inputs, shards=2, client=client)),
                            ("files", lambda: sharded.run(replicated, client=client, files=pattern))):
                t0 = time.perf_counter()
                res = fn()
                times[key].append(time.perf_counter() - t0)
                if key == "1":
                    ref = res
                elif key == "dask":
                    out = res
                    shard_times.extend(r.seconds for r in sharded.last_results)
                elif key == "files":
                    assert all(np.array_equal(res[k], v) for k, v in out.items()), "files run differs"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    t1, t2, td, tf = (statistics.median(times[k]) for k in ("1", "2", "dask", "files"))
    shard_s = statistics.median(shard_times)
    ctrl = two_processes(sharded, inputs, max(3, repeat // 2))
    print(f"one process, 1 thread : {t1 * 1e3:8.1f} ms")
    print(f"one process, 2 threads: {t2 * 1e3:8.1f} ms")
    print(f"local:2, K=2 shards   : {td * 1e3:8.1f} ms  (each shard computes {shard_s * 1e3:.1f} ms)  "
          f"{t1 / td:.2f}x the 1-thread time, {td / t2:.2f}x the 2-thread time")
    print(f"local:2, K=2 shard files: {tf * 1e3:6.1f} ms  (each task loads its .npz: nothing split or shipped "
          f"but the weights) {t1 / tf:.2f}x the 1-thread time, {tf / t2:.2f}x the 2-thread time")
    print(f"  control, no Dask: the two halves in two plain processes side by side take {ctrl * 1e3:.1f} ms "
          f"({t1 / ctrl:.2f}x the 1-thread time): the most local:2 could reach on this machine now")
    print(f"  {compare(sharded, ref, out)}")
    for what, t in (("local:2", td), ("local:2 with shard files", tf)):
        print(f"  goals, {what}: at least 1.6x faster than 1 thread: {'met' if t1 / t >= 1.6 else 'NOT met'} "
              f"({t1 / t:.2f}x); within 1.1x of 2 threads: {'met' if t <= 1.1 * t2 else 'NOT met'} ({t / t2:.2f}x)")
    print(f"  the control's bound: at best {t1 / ctrl:.2f}x the 1-thread time and {ctrl / t2:.2f}x the 2-thread time "
          f"with no overhead at all")
    terms = model_terms(o, shard_s, sharded, inputs, out, 2)
    print(f"  model for local:2: {sum(terms.values()) * 1e3:.1f} ms predicted ("
          + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in terms.items()) + f"), {td * 1e3:.1f} ms measured")
    overhead = sum(terms.values()) - terms["compute"]
    print(f"  runs (ms): 1 thread {_ms(times['1'])}; 2 threads {_ms(times['2'])}; local:2 {_ms(times['dask'])}; "
          f"files {_ms(times['files'])}")
    if shard_s < 0.05 or overhead > 0.25 * shard_s:
        print(f"  gradir: sharding does not pay at this size: a shard computes {shard_s * 1e3:.1f} ms against "
              f"{o['round_trip'] * 1e3:.1f} ms per task round trip and {nbytes(inputs) / 1e6:.1f} MB of inputs "
              f"to ship (the model's overhead {overhead * 1e3:.1f} ms per run); run it in one process")
        return
    base = 2 * shard_s  # the model's one-machine compute time, for the speed-ups
    print(f"  scaling model (N machines, one shard each; compute {base * 1e3:.0f} ms for the whole batch, split N "
          f"ways; speed-up against that compute alone):")
    print("      N   strong: T(ms)  speed-up  | files: T(ms) speed-up | weak: T(ms)  efficiency")
    for N in (1, 2, 4, 8, 16, 64):
        s = model(o, shard_s, sharded, inputs, out, N)
        f = model(o, shard_s, sharded, inputs, out, N, files=True)
        w = model(o, shard_s, sharded, inputs, out, N, scale=N / 2)  # a batch of B/2 per machine
        w1 = model(o, shard_s, sharded, inputs, out, 1, scale=0.5)
        print(f"  {N:5d}   {s * 1e3:12.1f}  {base / s:8.2f}  | {f * 1e3:11.1f} {base / f:8.2f} | {w * 1e3:11.1f}  "
              f"{w1 / w:9.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="S=25, B=128, I=H=128, C=256")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    big = (25, 128, 128, 128, 256) if args.quick else (100, 256, 256, 256, 512)
    small = (10, 16, 32, 32, 64)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared: timings are noisy)")
    t0 = time.perf_counter()
    with open_scheduler("local:2") as client:
        print(f"local:2 cluster started in {time.perf_counter() - t0:.1f} s")
        o = overheads(client, args.repeat)
        print(f"overheads: task round trip {o['round_trip'] * 1e3:.2f} ms, {o['per_task'] * 1e3:.2f} ms per task with "
              f"200 in flight; shipping {o['bw_in'] / 1e6:.0f} MB/s to a worker, {o['bw_out'] / 1e6:.0f} MB/s back; "
              f"adding partial sums {o['add_rate'] / 1e6:.0f} MB/s")
        bench(big, client, args.repeat, o)
        bench(small, client, args.repeat, o)


if __name__ == "__main__":
    main()
