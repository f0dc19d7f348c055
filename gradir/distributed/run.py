"""``gradir.shard(graph, batch=...)``: a ``Sharded`` graph, and running it in K shards.

The K shards run one after another in this process (``inline``, the reference) or as K tasks on a
Dask cluster (``local:N``, a scheduler address or a ``distributed.Client``).  gradir, not the engine,
puts the results together, in shard order: split outputs are concatenated, partial sums added in a
fixed pairwise tree, replicated outputs taken from shard 0.  So the bits depend only on K, never on
the number of workers, the order results arrive in or where each shard ran.
"""

from __future__ import annotations

import glob as globlib
import os
import sys
import time
import warnings
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from ..errors import ArgumentError, Diagnostic, GradirError, InputError, ShardError, path_problem, shown
from ..ir.graph import Graph
from .analysis import analyze
from .placement import Placement, integer, resolve_batch
from .scheduler import DASK_HINT, setup_error, check_client, open_scheduler
from .shardgraph import ROWS_LABEL, build_shard_graph
from .worker import ShardResult, digest, run_compiled, run_shard

__all__ = ["shard", "Sharded", "open_scheduler", "shard_file_paths", "tree_sum", "DASK_HINT", "DEFAULT_SHARDS"]

DEFAULT_SHARDS = 2


def shard(graph: Union[Graph, str, "os.PathLike[str]"], batch: Mapping[str, int], *,
          option: str = "batch") -> "Sharded":
    """Place every value of ``graph`` (a ``Graph``, IR text or a ``.gir`` path) when the inputs named in
    ``batch`` (by label or ``tN``) are split along the given axes; raises ``ShardError`` (located at
    the op) if an op refuses.  ``option``: how errors in ``batch`` name it (the command line: ``--shard``)."""
    if not isinstance(option, str):
        raise ArgumentError(f"option must be a string (how errors name the batch argument), got {shown(option)}")
    if not isinstance(batch, Mapping):
        raise ArgumentError(f"batch must be a mapping of input names to axes, e.g. {{\"x\": 0}}, got "
                            f"{type(batch).__name__}")
    for key, axis in batch.items():
        if not isinstance(key, str):
            raise ArgumentError(f"batch: the keys are input labels or value names (strings), got {shown(key)}")
        if integer(axis) is None:
            raise ArgumentError(f"batch: the axis of {key!r} must be an integer, got {shown(axis)}")
    batch = {key: integer(axis) for key, axis in batch.items()}  # np.int64(0) is axis 0
    from ..text.syntax import names_a_file
    if isinstance(graph, os.PathLike) or (isinstance(graph, str) and names_a_file(graph)):
        from ..text.syntax import load
        graph = load(graph)
    elif isinstance(graph, str):
        from ..text.syntax import parse
        graph = parse(graph)
    elif not isinstance(graph, Graph):
        raise ArgumentError(f"shard() takes a Graph, IR text or a path, not {type(graph).__name__}")
    if not graph.validated:
        graph.validate()
    from ..ops.composite import expand_composites
    graph = expand_composites(graph)  # composite ops are placed (and run) as their primitives
    axes = resolve_batch(graph, batch, option)
    place, means = analyze(graph, axes)
    return Sharded(graph, axes, place, build_shard_graph(graph, axes, place, means))


def tree_sum(parts: Sequence[np.ndarray], pool: Any = None) -> np.ndarray:
    """The sum of ``parts`` in a fixed pairwise tree in their order: ((p0+p1)+(p2+p3))+...; each sum in
    a buffer of ``pool`` where it has one of the shape (the same bits)."""
    if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence) or not parts or not all(
            isinstance(p, (np.ndarray, np.generic)) for p in parts):
        raise ArgumentError(f"tree_sum takes a non-empty list of arrays, got {shown(parts)}")

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


def shard_file_paths(files: Union[str, Sequence[str]]) -> list[str]:
    """The shard files of a glob (sorted; ``ShardError`` when none match) or of a list."""
    if isinstance(files, str):
        paths = sorted(globlib.glob(files))
        if not paths:
            raise ShardError(setup_error(f"no shard files match {files!r}"))
        return paths
    return [str(f) for f in files]


class Sharded:
    """A graph with its placements and its shard graph; ``run`` runs it in K shards."""

    def __init__(self, graph: Graph, batch: dict[str, int], placements: dict[str, Placement],
                 shard_graph: Graph) -> None:
        self.graph = graph
        self.batch = batch  # input value name -> its batch axis
        self.placements = placements  # value name -> Placement
        self.shard_graph = shard_graph
        # the input that tells a shard's Dropouts and MaxPools where its rows are (``shardgraph.ROWS_LABEL``), if any
        self.rows_input = next((i.name for i in shard_graph.inputs if i.label == ROWS_LABEL), None)
        self.text = shard_graph.to_text()
        self.key = digest(self.text)
        from ..ir.labels import output_keys
        self.output_keys = output_keys(graph)
        self.last_results: list[ShardResult] = []  # the shard results of the last run (benchmarks)
        self.last_retried: list[int] = []  # shards gradir resubmitted in the last run (their inputs lost)
        self._compiled: dict[Optional[int], Any] = {}
        from ..backends.cpu.buffers import BufferPool
        # the split inputs' and the combined outputs' buffers of earlier runs, once nobody holds them
        self._pool = BufferPool()

    def compiled(self, threads: Optional[int] = None) -> Any:
        """The shard graph compiled here (inline runs, and checking inputs before they are shipped): from
        the graph itself, so that errors point into the file the graph came from."""
        from ..backends.cpu.runtime import check_threads
        check_threads(threads)
        exe = self._compiled.get(threads)
        if exe is None:
            from ..backends.cpu.runtime import compile
            exe = self._compiled[threads] = compile(self.shard_graph, threads=threads)
        return exe

    def __repr__(self) -> str:
        return f"<Sharded {self.graph.name or ''} batch={self.batch}>"

    def describe(self) -> str:
        """Every value's placement, one a line, inputs first (what ``gradir plan --shard`` prints)."""
        from ..ir.labels import label_text
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
        has them), the others whole in every one.  Every input is checked (its shape, the split ones'
        rows against ``shards``) before anything is allocated: a shard count far past the batch is an
        ``InputError`` at once, not a dict per shard first."""
        from ..ir.labels import inputs_by_name, label_text
        if not isinstance(inputs, Mapping):
            raise ArgumentError(f"inputs must be a mapping of input names (labels or tN) to arrays, got "
                                f"{type(inputs).__name__}")
        shards = _check_shards(shards)
        if pool is not None and not callable(getattr(pool, "take", None)):
            raise ArgumentError(f"pool must be None or a gradir.backends.cpu.buffers.BufferPool, got "
                                f"{type(pool).__name__}")
        byname = inputs_by_name(self.graph, inputs, self._file)
        types = {i.name: i.type for i in self.graph.inputs}
        spans = {i.name: i.span for i in self.graph.inputs}
        labels = {i.name: label_text(i.label) for i in self.graph.inputs}

        def located(message: str, name: str) -> Diagnostic:
            span = spans.get(name)
            return Diagnostic(message, span, self.graph.source if span else None, filename=self._file)

        arrays: dict[str, np.ndarray] = {}
        for name, a in byname.items():
            try:
                a = np.asarray(a)
            except Exception as e:  # a ragged list, an object whose __array__ raises, ...
                raise InputError(located(f"input {name}: cannot be read as an array ({type(e).__name__}: "
                                         f"{str(e)[:200]})", name)) from None
            t = types.get(name)
            if t is not None and (a.ndim != t.rank or any(w is not None and d != w for d, w in zip(a.shape, t.shape))):
                got = "[" + ", ".join(map(str, a.shape)) + "]"
                raise InputError(located(f"input {name}: expected {t}, got an array of shape {got}", name))
            arrays[name] = a
        for name, ax in self.batch.items():
            if name not in arrays:
                raise InputError(located(f"missing input {name}{labels[name]} ({types[name]}), split along axis "
                                         f"{ax}", name))
            rows = arrays[name].shape[ax]
            if rows < shards:
                raise InputError(located(f"input {name}: its batch axis {ax} has {rows} rows, fewer than "
                                         f"{shard_count(shards)}", name))
        out: list[dict[str, np.ndarray]] = [{} for _ in range(shards)]
        split_axes = dict(self.batch)
        if self.rows_input is not None:  # (global row, rows) of every row of the batch, split like it
            name, ax = next(iter(self.batch.items()))
            rows = arrays[name].shape[ax]
            arrays[self.rows_input] = np.stack([np.arange(rows), np.full(rows, rows)], axis=1).astype(np.int64)
            split_axes[self.rows_input] = 0
        for name, a in arrays.items():
            if name in split_axes:
                for k, part in enumerate(np.array_split(a, shards, axis=split_axes[name])):
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

    def check_shards(self, shards: int) -> None:
        """``InputError`` (located at the input) when a batch axis of static size has fewer rows than
        ``shards``: said before any input is read or generated."""
        shards = _check_shards(shards)
        for i in self.graph.inputs:
            rows = i.type.shape[self.batch[i.name]] if i.name in self.batch else None
            if rows is not None and rows < shards:
                raise InputError(Diagnostic(f"input {i.name}: its batch axis {self.batch[i.name]} has {rows} rows, "
                                            f"fewer than {shard_count(shards)}", i.span,
                                            self.graph.source if i.span else None, filename=self._file))

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
        _check_run_arguments(inputs, shards, client, files, threads, retries, progress, jitter)
        shards = None if shards is None else integer(shards)  # np.int64(4) is 4 shards
        paths = self._paths(files)
        if paths is not None:
            if shards is not None and shards != len(paths):  # as "no shard files match": "gradir: error: ..."
                raise ShardError(setup_error(f"shards={shards} but {len(paths)} shard file"
                                             f"{'s match' if len(paths) != 1 else ' matches'} {shown(files)}: "
                                             f"give shards={len(paths)} or leave it out (one shard per file)"))
            shards = len(paths)
        if shards is None:
            shards = DEFAULT_SHARDS
        self._pool.reclaim()  # the buffers of earlier runs that nobody holds any more
        if paths is None:
            parts = self.split_inputs(inputs or {}, shards, self._pool)
        elif self.rows_input is not None:
            raise ShardError(setup_error("the graph has a Dropout that draws its mask (or a MaxPool that writes "
                                         "Indices) on split values: each shard works at its rows' global indices, "
                                         "which gradir knows only when it splits the inputs itself; give the "
                                         "inputs, not shard files"))
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
            self._pool.lend(a for part in parts for n, a in part.items() if n in self.batch or n == self.rows_input)
        out = self.combine([r.outputs for r in results], self._pool)
        self._pool.lend(out.values())
        return out

    def _paths(self, files: Union[str, Sequence[str], None]) -> Optional[list[str]]:
        return None if files is None else shard_file_paths(os.fspath(files) if isinstance(files, os.PathLike)
                                                           else files)

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

        from ..ops.userops import loaded_files
        ops = loaded_files()  # a worker process loads the user op files the graph may use

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
                                  jitter, ops, pure=False, retries=retries,
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
        n = len(self.graph.outputs)
        if isinstance(shard_outputs, (str, bytes)) or not isinstance(shard_outputs, Sequence) or not shard_outputs \
                or not all(isinstance(o, Sequence) and len(o) == n and all(isinstance(a, np.ndarray) for a in o)
                           for o in shard_outputs):
            raise ArgumentError(f"shard_outputs must be a non-empty list, per shard, of its {n} output arrays in the "
                                f"graph's output order, got {shown(shard_outputs)}")
        if pool is not None and not callable(getattr(pool, "take", None)):
            raise ArgumentError(f"pool must be None or a gradir.backends.cpu.buffers.BufferPool, got "
                                f"{type(pool).__name__}")
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


def shard_count(shards: int) -> str:
    """``shards`` for "has 8 rows, fewer than ...": ``the 1180591620717411303424 shards`` (in full up to 30
    digits), ``the 2^100 shards`` (a power of two), ``the shards asked for (more than 2^16609)`` (10**5000
    has no short name, and Python will not print an int of over 4300 digits)."""
    if shards < 10 ** 30:
        return f"the {shards} shards"
    k = shards.bit_length() - 1
    return f"the 2^{k} shards" if shards == 1 << k else f"the shards asked for (more than 2^{k})"


def _check_shards(shards: Any) -> int:
    """``shards`` as an int (a NumPy integer too), or ``ArgumentError`` when it is not a positive integer."""
    number = integer(shards)
    if number is None or number < 1:
        raise ArgumentError(f"shards must be a positive integer, got {shown(shards)}")
    return number


def _check_run_arguments(inputs: Any, shards: Any, client: Any, files: Any, threads: Any, retries: Any,
                         progress: Any, jitter: Any) -> None:
    """``ArgumentError`` for an argument of ``Sharded.run`` of the wrong type or out of range, before
    anything is read, split or started."""
    import math
    import numbers
    from ..backends.cpu.runtime import check_threads
    if inputs is not None and not isinstance(inputs, Mapping):
        raise ArgumentError(f"inputs must be a mapping of input names (labels or tN) to arrays, got "
                            f"{type(inputs).__name__}")
    if shards is not None:
        _check_shards(shards)
    check_client(client)
    if files is not None:
        one = (str, os.PathLike)
        if isinstance(files, (bytes, bytearray)) or not (
                isinstance(files, one) or (isinstance(files, Sequence) and all(isinstance(f, one) for f in files))):
            raise ArgumentError(f"files must be a glob or a list of paths of shard files, got {shown(files)}")
        if not isinstance(files, one) and not files:
            raise ArgumentError("files is an empty list: give one .npz per shard")
        for f in [files] if isinstance(files, one) else files:
            try:
                name = os.fspath(f)
            except Exception as e:  # noqa: BLE001 - a caller's __fspath__ that raises
                raise ArgumentError(f"files: {shown(f)} cannot be read as a path ({type(e).__name__})") from None
            problem = path_problem(name) if isinstance(name, str) else None
            if problem:
                raise ArgumentError(f"files: the path {shown(name)} {problem}")
    check_threads(threads)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise ArgumentError(f"retries must be an integer from 0 to 100, got {shown(retries)}")
    if progress is not None and not isinstance(progress, (bool, np.bool_)):
        raise ArgumentError(f"progress must be True, False or None, got {shown(progress)}")
    if isinstance(jitter, bool) or not isinstance(jitter, numbers.Real) or not (
            math.isfinite(jitter) and 0 <= jitter <= 60):
        raise ArgumentError(f"jitter must be a number of seconds from 0 to 60, got {shown(jitter)}")


def _progress(done: int, total: int, seconds: float, what: str) -> None:
    end = "\n" if done == total else ""
    print(f"\rgradir: {done}/{total} shards done ({what} last, {seconds:.2f} s)\033[K", end=end, file=sys.stderr,
          flush=True)
