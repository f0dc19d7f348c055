"""The command-line side of sharding: ``gradir run FILE --shard NAME:AXIS --shards K [--scheduler SPEC]``
and ``gradir plan FILE --shard NAME:AXIS`` (every value's placement)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Mapping

from ..errors import UsageError

# below this much compute per shard, Dask's per-task cost (ms) and the shipping of inputs eat the gain
PAYS_MS = 50

__all__ = ["add_run_arguments", "add_plan_arguments", "batch_spec", "check_run_arguments", "sharded_runs",
           "print_placements", "split_from_files", "check_not_in_shard_files"]


def shard_arg(text: str) -> str:
    """An argparse type: ``NAME:AXIS[,NAME:AXIS...]`` (checked here, resolved against the graph later)."""
    for part in text.split(","):
        name, colon, axis = part.strip().rpartition(":")
        if not colon or not name or not axis.lstrip("-").isdigit() or len(axis) > 6:
            raise argparse.ArgumentTypeError(f"expected NAME:AXIS[,NAME:AXIS...] (an input's label or tN and its "
                                             f"batch axis, e.g. t0:0), got {text[:60]!r}")
    return text


def scheduler_arg(text: str) -> str:
    if text == "inline" or "://" in text or text.startswith("local:"):
        if text.startswith("local:") and not (text[6:].isdigit() and 1 <= int(text[6:]) <= 256):
            raise argparse.ArgumentTypeError(f"local:N needs N worker processes from 1 to 256, got {text!r}")
        if text.startswith("tcp://"):
            from ..distributed.scheduler import tcp_host_port
            try:
                tcp_host_port(text)
            except ValueError as e:
                raise argparse.ArgumentTypeError(str(e)) from None
        return text
    raise argparse.ArgumentTypeError(f"expected inline, local:N or a scheduler address such as tcp://host:8786, "
                                     f"got {text[:60]!r}")


def _shard_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", action="append", default=[], type=shard_arg, metavar="NAME:AXIS[,...]",
                   help="split these inputs (label or tN) along their batch axis, data-parallel "
                        "(docs/distributed.md; repeatable)")


def add_run_arguments(r: argparse.ArgumentParser) -> None:
    from ..distributed.run import DEFAULT_SHARDS
    _shard_option(r)
    r.add_argument("--shards", type=int, default=None, metavar="K",
                   help=f"with --shard: run K shards (default {DEFAULT_SHARDS}); the results are the same bits for "
                        f"a given K wherever and in whatever order the shards run")
    r.add_argument("--scheduler", type=scheduler_arg, default=None, metavar="SPEC",
                   help="with --shard: inline (default: the shards one after another here), local:N (a Dask "
                        "LocalCluster of N worker processes) or a Dask scheduler address tcp://host:8786")
    r.add_argument("--shard-files", metavar="GLOB", help="with --shard: one .npz per shard (sorted by name) "
                   "holding its slice of the split inputs; each shard task loads its own")


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    _shard_option(p)


def batch_spec(texts: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for text in texts:
        for part in text.split(","):
            name, _, axis = part.strip().rpartition(":")
            if name in out:
                raise UsageError(f"--shard names {name} twice")
            out[name] = int(axis)
    return out


def check_run_arguments(args: argparse.Namespace, graph: Any = None) -> None:
    """Usage errors of the sharding options, before anything runs.  With the loaded ``graph``: its
    placements (``args.sharded``), so that a refusal comes before any input is read or generated."""
    if graph is not None:
        if args.shard:
            from ..distributed.run import shard
            args.sharded = shard(graph, batch_spec(args.shard), option="--shard")
            if args.shards is not None and not args.shard_files:
                args.sharded.check_shards(args.shards)  # more shards than rows: before any input is generated
        return
    if not args.shard:
        for opt, v in (("--shards", args.shards), ("--scheduler", args.scheduler), ("--shard-files", args.shard_files)):
            if v is not None:
                raise UsageError(f"run: {opt} goes with --shard NAME:AXIS (which inputs to split)")
        return
    if args.shards is not None and args.shards < 1:
        raise UsageError(f"run: --shards must be a positive integer, got {args.shards}")
    if args.scheduler and "://" in args.scheduler:
        from ..distributed.scheduler import probe
        probe(args.scheduler)  # nothing (or no Dask scheduler) there: said before any input is read or generated
    if args.shard_files:
        from ..distributed.run import shard_file_paths
        n = len(shard_file_paths(args.shard_files))  # no file matches: said before any input is generated
        if args.shards is not None and args.shards != n:
            from ..errors import ShardError
            from ..distributed.scheduler import setup_error
            match = "shard files match" if n != 1 else "shard file matches"
            raise ShardError(setup_error(f"--shards {args.shards} but {n} {match} --shard-files {args.shard_files!r}: "
                                         f"give --shards {n} or leave it out (one shard per file)"))
    for opt, bad in (("--trace", args.trace), ("--check-numerics", args.check_numerics),
                     ("--backend reference", args.backend != "cpu")):
        if bad:
            raise UsageError(f"run: {opt} does not go with --shard (run without --shard to use it)")


def check_not_in_shard_files(args: argparse.Namespace, given: Mapping[str, Any]) -> None:
    """With ``--shard-files``, each split input comes from the shard files alone: one also given with
    ``--inputs``/``--input`` (``given``, keyed by value name) is an ``InputError`` (which copy is meant?)."""
    from ..errors import Diagnostic, InputError
    from ..ir.labels import label_text
    if not args.shard_files:
        return
    labels = {i.name: i.label for i in args.sharded.graph.inputs}
    both = [n for n in args.sharded.batch if n in given]
    if both:
        where = ", ".join(args.inputs or []) or ", ".join(p.partition("=")[2] for p in args.input)
        raise InputError(Diagnostic(
            f"{', '.join(n + label_text(labels.get(n)) for n in both)}: split by --shard and read from the shard "
            f"files, and given with --inputs/--input too; give {'it' if len(both) == 1 else 'them'} once (without "
            f"--shard-files, --inputs holds the whole batch)", filename=where or None))


def split_from_files(args: argparse.Namespace) -> dict[str, Any]:
    """The split inputs a ``--shard-files`` run uses, whole: each one's slices from the shard files (in
    their sorted order) concatenated along its batch axis, keyed by value name.  For ``--save-inputs``,
    so that the saved file holds what the run really used."""
    import numpy as np
    from ..arrayfiles import read_npz
    from ..errors import Diagnostic, InputError
    from ..ir.labels import inputs_by_name, label_text
    from ..distributed.run import shard_file_paths
    sharded = args.sharded
    labels = {i.name: i.label for i in sharded.graph.inputs}
    parts: dict[str, list] = {n: [] for n in sharded.batch}
    for path in shard_file_paths(args.shard_files):
        arrays = inputs_by_name(sharded.graph, read_npz(path, "shard file"), path)
        for n in sharded.batch:
            if n not in arrays:
                raise InputError(Diagnostic(f"shard file: holds no {n}{label_text(labels.get(n))}, which --shard "
                                            f"splits", filename=path))
            parts[n].append(arrays[n])
    out = {}
    for n, axis in sharded.batch.items():
        try:
            out[n] = np.concatenate(parts[n], axis=axis)
        except (ValueError, np.exceptions.AxisError) as e:
            raise InputError(Diagnostic(f"--shard-files: the slices of {n}{label_text(labels.get(n))} do not fit "
                                        f"together along axis {axis}: {e}", filename=args.shard_files)) from None
    return out


def sharded_runs(args: argparse.Namespace, inputs: Mapping[str, Any]) -> tuple[dict, list[float], str]:
    """Run ``args.sharded`` (placed by ``check_run_arguments``) ``args.repeat`` times (one scheduler for
    all); returns the outputs, the times and what ran them, for the report."""
    from ..distributed.run import Sharded
    from ..distributed.scheduler import open_scheduler
    sharded: Sharded = args.sharded
    if args.shard_files:
        inputs = {k: v for k, v in inputs.items() if k not in sharded.batch}
    times = []
    outputs: dict = {}
    spec = args.scheduler or "inline"
    t0 = time.perf_counter()
    with open_scheduler(spec) as client:
        start = time.perf_counter() - t0
        for _ in range(args.repeat):
            t = time.perf_counter()
            outputs = sharded.run(inputs, shards=args.shards, client=client, files=args.shard_files,
                                  threads=args.threads)
            times.append(time.perf_counter() - t)
    k = len(sharded.last_results)
    how = f"{k} shard{'s' if k != 1 else ''}, {spec}"
    if spec.startswith("local:"):
        how += f"; the cluster took {start:.1f} s to start"
    run_s = [r.seconds for r in sharded.last_results]
    print(f"gradir: each shard ran {min(run_s) * 1e3:.1f} to {max(run_s) * 1e3:.1f} ms (median "
          f"{statistics.median(run_s) * 1e3:.1f} ms) in the last run", file=sys.stderr)
    wall = statistics.median(times)
    if spec != "inline" and statistics.median(run_s) < PAYS_MS / 1e3:
        print(f"gradir: note: sharding does not pay here: a shard computes for {statistics.median(run_s) * 1e3:.1f} "
              f"ms, while a run took {wall * 1e3:.1f} ms; a Dask task costs milliseconds on its own, so give each "
              f"shard {PAYS_MS} ms or more of work (fewer shards, a larger batch), or run without --shard",
              file=sys.stderr)
    return outputs, times, how


def print_placements(args: argparse.Namespace) -> int:
    """``gradir plan FILE --shard ...``: every value's placement and how each output is put together."""
    from ..text.syntax import load
    from ..distributed.run import shard
    graph = load(args.file)
    sharded = shard(graph, batch_spec(args.shard), option="--shard")
    sys.stdout.write(sharded.describe())
    return 0
