"""``gradir.shard(graph, batch=...)``: a ``Sharded`` graph, and running it in K shards.

The K shards run one after another in this process (``inline``, the reference) or as K tasks on a
Dask cluster (``local:N``, a scheduler address or a ``distributed.Client``).  gradir, not the engine,
puts the results together, in shard order: split outputs are concatenated, partial sums added in a
fixed pairwise tree, replicated outputs taken from shard 0.  So the bits depend only on K, never on
the number of workers, the order results arrive in or where each shard ran.
"""

from __future__ import annotations

import contextlib
import glob as globlib
import os
import sys
import time
import warnings
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from ..errors import ArgumentError, Diagnostic, GradirError, InputError, ShardError, shown
from ..graph import Graph
from .analysis import analyze
from .placement import Placement, resolve_batch
from .shardgraph import build_shard_graph
from .worker import ShardResult, digest, run_compiled, run_shard

__all__ = ["shard", "Sharded", "open_scheduler", "shard_file_paths", "tree_sum", "DASK_HINT", "DEFAULT_SHARDS"]

DEFAULT_SHARDS = 2
DASK_HINT = 'Dask is not installed: pip install "gradir[dask]" (or run the shards with --scheduler inline)'


def shard(graph: Union[Graph, str, "os.PathLike[str]"], batch: Mapping[str, int], *,
          option: str = "batch") -> "Sharded":
    """Place every value of ``graph`` (a ``Graph``, IR text or a ``.gir`` path) when the inputs named in
    ``batch`` (by label or ``tN``) are split along the given axes; raises ``ShardError`` (located at
    the op) if an op refuses.  ``option``: how errors in ``batch`` name it (the command line: ``--shard``)."""
    if isinstance(graph, os.PathLike) or (isinstance(graph, str) and "\n" not in graph and (
            os.path.isfile(graph) or graph.strip().endswith(".gir"))):
        from ..syntax import load
        graph = load(graph)
    elif isinstance(graph, str):
        from ..syntax import parse
        graph = parse(graph)
    elif not isinstance(graph, Graph):
        raise ArgumentError(f"shard() takes a Graph, IR text or a path, not {type(graph).__name__}")
    if not isinstance(batch, Mapping):
        raise ArgumentError(f"batch must be a mapping of input names to axes, e.g. {{\"x\": 0}}, got "
                            f"{type(batch).__name__}")
    if not graph.validated:
        graph.validate()
    axes = resolve_batch(graph, batch, option)
    place, means = analyze(graph, axes)
    return Sharded(graph, axes, place, build_shard_graph(graph, axes, place, means))


def tree_sum(parts: Sequence[np.ndarray], pool: Any = None) -> np.ndarray:
    """The sum of ``parts`` in a fixed pairwise tree in their order: ((p0+p1)+(p2+p3))+...; each sum in
    a buffer of ``pool`` where it has one of the shape (the same bits)."""
    def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        buf = pool.take(np.result_type(a, b), np.broadcast_shapes(a.shape, b.shape)) if pool is not None else None
        return np.add(a, b, out=buf)

    level = list(parts)
    while len(level) > 1:
        nxt = [add(level[k], level[k + 1]) for k in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


# glibc's allocator in the workers of a local:N cluster.  Dask sets MALLOC_TRIM_THRESHOLD_=65536 in its
# workers, which also turns off glibc's adaptive mmap threshold: every array over 128 KiB (a shard's
# inputs, its intermediates, a result being received) is then a fresh mmap whose pages fault in on
# first touch, and the pages go back to the system when it is freed.  On the VMs measured that is
# 1-2 ms per MB: 40-100 ms per task of the LSTM LM at B=256.  A worker runs the same shard graph
# again and again, so it keeps its arrays' memory instead (up to its peak use).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 31)}


@contextlib.contextmanager
def open_scheduler(spec: Any) -> Iterator[Any]:
    """``None``/``"inline"`` -> ``"inline"``; ``"local:N"`` -> a client of a ``LocalCluster`` of N worker
    processes (one thread each) closed on exit; ``"tcp://host:port"`` (or any address Dask takes) -> a
    client of that scheduler; a ``distributed.Client`` is used as it is."""
    if spec is None or spec == "inline":
        yield "inline"
        return
    if not isinstance(spec, str):
        yield spec  # a Client (or anything with submit/as_completed-compatible futures)
        return
    try:
        import logging
        from distributed import Client, LocalCluster
    except ImportError:
        raise ShardError(_setup(DASK_HINT)) from None
    if spec.startswith("local:"):
        n = spec[6:]
        if not n.isdigit() or not 1 <= int(n) <= 256:
            raise ArgumentError(f"scheduler {spec!r}: local:N needs a number of worker processes from 1 to 256")
        try:
            import dask
            # Without the workers' statistical profiler, which samples the task's stack every 10 ms
            # holding the GIL: a shard of the LSTM LM computed in 617 instead of 638 ms.
            env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
            env.update(MALLOC_ENV)
            # and with the workers' periodic monitors slowed down (system monitor 500 ms -> 5 s,
            # memory monitor 100 ms -> 1 s, event-loop tick 20 ms -> 500 ms): on their worker
            # they run beside the shard, and the slower of two shards had computed 567-645 ms
            # against 552-591 with them slowed (five runs each)
            quiet = {"distributed.admin.system-monitor.interval": "5s",
                     "distributed.worker.memory.monitor-interval": "1s", "distributed.admin.tick.interval": "500ms"}
            with dask.config.set({"distributed.worker.profile.enabled": False, **quiet,
                                  "distributed.nanny.pre-spawn-environ": env}):
                cluster = LocalCluster(n_workers=int(n), threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=logging.ERROR)
        except (RuntimeError, OSError) as e:  # e.g. a worker could not start (spawn re-runs __main__)
            raise ShardError(_setup(f"cannot start a local Dask cluster ({spec}): {e}; a script that starts "
                                    f"one must guard its main code with `if __name__ == \"__main__\":`")) from None
        try:
            # results come straight from the workers, not through the scheduler (a 16 MB result
            # of the LSTM LM at B=256: 10-20 ms after its task ends instead of 25-100 ms)
            with Client(cluster, direct_to_workers=True) as client:
                yield client
        finally:
            cluster.close()
        return
    probe(spec)
    try:
        client = Client(spec, timeout="20s")
    except (OSError, ValueError, TimeoutError) as e:
        raise ShardError(_setup(f"cannot reach the Dask scheduler {spec!r}: {e}")) from None
    with client:
        yield client


def shard_file_paths(files: Union[str, Sequence[str]]) -> list[str]:
    """The shard files of a glob (sorted; ``ShardError`` when none match) or of a list."""
    if isinstance(files, str):
        paths = sorted(globlib.glob(files))
        if not paths:
            raise ShardError(_setup(f"no shard files match {files!r}"))
        return paths
    return [str(f) for f in files]


def _setup(message: str) -> Diagnostic:
    """An error of the run's set-up (Dask, the scheduler), not of a file: "gradir: error: ..."."""
    return Diagnostic(message, filename="gradir")


def tcp_host_port(spec: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` as (host, port); ``ValueError`` saying what is expected otherwise."""
    from urllib.parse import urlsplit
    try:
        u = urlsplit(spec)
        host, port = u.hostname, u.port
    except ValueError:
        host = port = None
    if not host or not port:
        raise ValueError(f"scheduler {spec!r}: expected tcp://HOST:PORT, e.g. tcp://10.0.0.5:8786")
    return host, port


def probe(spec: str) -> None:
    """Fail at once, not after Dask's 20 s of retries, when nothing listens at a ``tcp://host:port``
    scheduler address (a refused connection or an unknown host); a scheduler that accepts the
    connection but is slow to answer still gets Dask's timeout."""
    import socket
    if not spec.startswith("tcp://"):
        return
    try:
        host, port = tcp_host_port(spec)
    except ValueError as e:
        raise ArgumentError(str(e)) from None
    try:
        socket.create_connection((host, port), timeout=5).close()
    except socket.timeout:
        return  # a slow network: let Dask try
    except OSError as e:
        raise ShardError(_setup(f"cannot reach the Dask scheduler {spec!r}: {e.strerror or e}")) from None


class Sharded:
    """A graph with its placements and its shard graph; ``run`` runs it in K shards."""

    def __init__(self, graph: Graph, batch: dict[str, int], placements: dict[str, Placement],
                 shard_graph: Graph) -> None:
        self.graph = graph
        self.batch = batch  # input value name -> its batch axis
        self.placements = placements  # value name -> Placement
        self.shard_graph = shard_graph
        self.text = shard_graph.to_text()
        self.key = digest(self.text)
        from ..labels import output_keys
        self.output_keys = output_keys(graph)
        self.last_results: list[ShardResult] = []  # the shard results of the last run (benchmarks)
        self.last_retried: list[int] = []  # shards gradir resubmitted in the last run (their inputs lost)
        self._compiled: dict[Optional[int], Any] = {}
        from ..buffers import BufferPool
        # the split inputs' and the combined outputs' buffers of earlier runs, once nobody holds them
        self._pool = BufferPool()

    def compiled(self, threads: Optional[int] = None) -> Any:
        """The shard graph compiled here (inline runs, and checking inputs before they are shipped): from
        the graph itself, so that errors point into the file the graph came from."""
        exe = self._compiled.get(threads)
        if exe is None:
            from ..runtime import compile
            exe = self._compiled[threads] = compile(self.shard_graph, threads=threads)
        return exe

    def __repr__(self) -> str:
        return f"<Sharded {self.graph.name or ''} batch={self.batch}>"

    def describe(self) -> str:
        """Every value's placement, one a line, inputs first (what ``gradir plan --shard`` prints)."""
        from ..labels import label_text
        lines = []
        for i in self.graph.inputs:
            lines.append(f"input {i.name}{label_text(i.label)} : {i.type}  {self.placements[i.name]}")
        for op in self.graph.ops:
            for r in op.results:
                lines.append(f"{r} = {op.op_name} : {self.graph.types[r]}  {self.placements[r]}")
        outs = {n: k for n, k in zip(self.graph.outputs, self.output_keys)}
        lines.append("outputs: " + ", ".join(
            f"{n}{'' if k == n else ' ' + repr(k)} {self._combine_word(self.placements[n])}" for n, k in outs.items()))
        return "\n".join(lines) + "\n"

    @staticmethod
    def _combine_word(p: Placement) -> str:
        return {"split": f"concatenated along axis {p.axis}", "partial": "summed over the shards",
                "replicated": "from shard 0"}[p.kind]

    # -- inputs ------------------------------------------------------------------
    def split_inputs(self, inputs: Mapping[str, Any], shards: int, pool: Any = None) -> list[dict[str, np.ndarray]]:
        """``inputs`` (by label or value name) cut into ``shards`` dicts: split inputs by
        ``np.array_split`` along their batch axis (contiguous copies, in buffers of ``pool`` where it
        has them), the others whole in every one."""
        from ..labels import inputs_by_name
        byname = inputs_by_name(self.graph, inputs, self._file)
        types = {i.name: i.type for i in self.graph.inputs}
        out: list[dict[str, np.ndarray]] = [{} for _ in range(shards)]
        spans = {i.name: i.span for i in self.graph.inputs}
        for name, a in byname.items():
            a = np.asarray(a)
            t = types.get(name)
            if t is not None and (a.ndim != t.rank or any(w is not None and d != w for d, w in zip(a.shape, t.shape))):
                from ..errors import Diagnostic
                got = "[" + ", ".join(map(str, a.shape)) + "]"
                raise InputError(Diagnostic(f"input {name}: expected {t}, got an array of shape {got}", spans[name],
                                            self.graph.source if spans[name] else None, filename=self._file))
            if name in self.batch:
                ax = self.batch[name]
                if a.shape[ax] < shards:
                    raise InputError(f"input {name}: its batch axis {ax} has {a.shape[ax]} rows, fewer than the "
                                     f"{shards} shards")
                for k, part in enumerate(np.array_split(a, shards, axis=ax)):
                    buf = pool.take(part.dtype, part.shape) if pool is not None else None
                    if buf is None:
                        out[k][name] = np.ascontiguousarray(part)
                    else:
                        np.copyto(buf, part)
                        out[k][name] = buf
            else:
                for k in range(shards):
                    out[k][name] = a
        return out

    @property
    def _file(self) -> str:
        return self.graph.source.filename if self.graph.source else "<graph>"

    # -- running -----------------------------------------------------------------
    def run(self, inputs: Optional[Mapping[str, Any]] = None, shards: Optional[int] = None, client: Any = None, *,
            files: Union[str, Sequence[str], None] = None, threads: Optional[int] = None, retries: int = 2,
            progress: Optional[bool] = None, jitter: float = 0.0) -> dict[str, np.ndarray]:
        """Run in ``shards`` shards; returns ``{output key: array}`` like ``Executable.run``.

        ``inputs``: arrays by label or value name; split inputs are cut by gradir.  ``files``: a glob
        (or a list) of one ``.npz`` per shard, in sorted order, each holding that shard's slice of the
        split inputs (then ``inputs`` holds only the replicated ones, and ``shards`` is the number of
        files); each task loads its own file.  ``client``: ``None``/``"inline"``, ``"local:N"``, a
        scheduler address or a ``distributed.Client``.  ``threads``: gradir threads per shard
        (default 1 on Dask workers, gradir's default inline).  ``progress``: a line per finished shard
        on stderr (default: when stderr is a terminal).  ``jitter``: a test hook, see ``run_shard``."""
        paths = self._paths(files)
        if paths is not None:
            if shards is not None and shards != len(paths):
                raise ArgumentError(f"shards={shards} but {len(paths)} shard files match {files!r}")
            shards = len(paths)
        if shards is None:
            shards = DEFAULT_SHARDS
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ArgumentError(f"shards must be a positive integer, got {shown(shards)}")
        self._pool.reclaim()  # the buffers of earlier runs that nobody holds any more
        if paths is None:
            parts = self.split_inputs(inputs or {}, shards, self._pool)
        else:
            parts = [dict(inputs or {})] * shards
        if progress is None:
            progress = sys.stderr.isatty()
        self.last_retried = []
        with open_scheduler(client) as c:
            if c == "inline":
                results = self._inline(parts, paths, threads, progress, jitter)
            else:
                results = self._dask(c, parts, paths, 1 if threads is None else threads, retries, progress, jitter)
        self.last_results = results
        if paths is None:  # the split inputs' buffers, for the next run once nothing holds them
            self._pool.lend(a for part in parts for n, a in part.items() if n in self.batch)
        out = self.combine([r.outputs for r in results], self._pool)
        self._pool.lend(out.values())
        return out

    def _paths(self, files: Union[str, Sequence[str], None]) -> Optional[list[str]]:
        return None if files is None else shard_file_paths(files)

    def _inline(self, parts: list[dict], paths: Optional[list[str]], threads: Optional[int], progress: bool,
                jitter: float) -> list[ShardResult]:
        exe = self.compiled(threads)
        out = []
        t0 = time.perf_counter()
        for k, part in enumerate(parts):
            out.append(run_compiled(exe, k, part, paths[k] if paths else None, jitter))
            if progress:
                _progress(k + 1, len(parts), time.perf_counter() - t0, "inline")
        return out

    def _dask(self, client: Any, parts: list[dict], paths: Optional[list[str]], threads: int, retries: int,
              progress: bool, jitter: float) -> list[ShardResult]:
        """The K shard tasks on Dask.  Shipped inputs are scattered to the workers first (straight to
        them when the client talks to workers directly, as ``local:N``'s does), one shard's arrays
        per worker in turn, so that each task runs where its inputs are; when a worker dies with a
        shard's inputs, gradir scatters that shard again and resubmits it (up to ``retries`` times).
        A task whose worker dies mid-run is rerun elsewhere by Dask itself."""
        from concurrent.futures import CancelledError

        from distributed import as_completed
        if paths is None:  # fail here, located, rather than on a worker
            exe = self.compiled(threads)
            for part in parts:
                exe.check_inputs(part)
        token = f"{self.key[:12]}-{time.monotonic_ns()}"
        attempts = [0] * len(parts)
        held: list[Any] = []  # the scattered inputs, released at the end

        def submit(ks: Sequence[int]) -> dict[Any, int]:
            if paths is None:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=".*Large object.*")
                    args = client.scatter([parts[k] for k in ks], hash=False)
                held.extend(args)
            else:  # the replicated inputs only: each task loads its own file
                args = [parts[k] for k in ks]
            out = {}
            for k, arg in zip(ks, args):
                out[client.submit(run_shard, self.text, self.key, k, arg, paths[k] if paths else None, threads,
                                  jitter, pure=False, retries=retries,
                                  key=f"gradir-shard-{k}-{token}-{attempts[k]}")] = k
            return out

        futures = submit(range(len(parts)))
        results: list[Optional[ShardResult]] = [None] * len(parts)
        t0 = time.perf_counter()
        done = 0
        try:
            pending = as_completed(list(futures))
            for f in pending:
                k = futures[f]
                try:
                    results[k] = f.result()
                except GradirError:
                    raise
                except Exception as e:  # the engine's own failures (KilledWorker, lost inputs, ...)
                    # Only inputs lost with their worker (the task cancelled: "already forgotten";
                    # or the connection to it closed) are shipped again; a task that failed by
                    # itself, or that Dask suspects of killing workers (KilledWorker), was retried
                    # by Dask already and fails the run.
                    lost = isinstance(e, (CancelledError, OSError))
                    if paths is None and lost and attempts[k] < retries:
                        attempts[k] += 1
                        self.last_retried.append(k)
                        if progress:
                            print(f"\rgradir: shard {k}: {type(e).__name__} on Dask (its worker lost?); its inputs "
                                  f"shipped again, attempt {attempts[k] + 1}\033[K", file=sys.stderr)
                        again = submit([k])
                        futures.update(again)
                        pending.update(list(again))
                        continue
                    raise ShardError(f"shard {k} of {len(parts)} failed on Dask: {type(e).__name__}: {e}") from None
                done += 1
                if progress:
                    _progress(done, len(parts), time.perf_counter() - t0, f"shard {k}")
                if done == len(parts):
                    # not waiting for as_completed to find out it is empty: its bookkeeping runs
                    # on Dask's event loop, and the last round took 10-35 ms after the last result
                    break
        finally:
            for f in list(futures) + held:
                f.release()
        return results  # type: ignore[return-value]

    def combine(self, shard_outputs: Sequence[Sequence[np.ndarray]], pool: Any = None) -> dict[str, np.ndarray]:
        """The outputs from each shard's (in shard order): concatenated, summed or taken from shard 0
        (into buffers of ``pool`` where it has them)."""
        out: dict[str, np.ndarray] = {}
        for j, (name, key) in enumerate(zip(self.graph.outputs, self.output_keys)):
            p = self.placements[name]
            parts = [s[j] for s in shard_outputs]
            if p.is_split:
                shape = list(parts[0].shape)
                shape[p.axis] = sum(a.shape[p.axis] for a in parts)
                dtype = np.result_type(*parts)
                buf = pool.take(dtype, tuple(shape)) if pool is not None else None
                out[key] = np.concatenate(parts, axis=p.axis, out=buf)
            elif p.is_partial:
                out[key] = tree_sum(parts, pool)
            else:
                out[key] = parts[0]
        return out


def _progress(done: int, total: int, seconds: float, what: str) -> None:
    end = "\n" if done == total else ""
    print(f"\rgradir: {done}/{total} shards done ({what} last, {seconds:.2f} s)\033[K", end=end, file=sys.stderr,
          flush=True)
