"""The inputs of a run: values given in ``.npz``/``.npy`` files or ``name=file`` pairs
(``load_inputs``), and those drawn for the inputs not given (``demo_inputs``, ``complete_inputs``:
each operand's ``sample`` rule, valid LSTM weights, sequence lengths and labels).  ``gradir run`` and
``gradir gradcheck`` (and ``gradir.gradcheck`` in Python) draw them the same way."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping, Sequence, Union

import numpy as np

from ..arrayfiles import load_array_file, read_npz
from ..errors import Diagnostic, InputError
from ..ir.graph import Graph

if TYPE_CHECKING:
    from ..backends.cpu.runtime import Executable

__all__ = ["demo_inputs", "complete_inputs", "check_generated", "load_inputs"]


def demo_inputs(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Reproducible inputs: floats ~ N(0, 1) or the uniform range their first consumer asks
    for (LSTM weights: U(±1/√H)), integers in the range their consumer expects (e.g.
    sequence lengths in 1..S, class labels in 0..C-1), booleans fair coins; '?' dims are 2."""
    rng = np.random.default_rng(seed)
    ranges: dict[str, tuple[int, int]] = {}
    scales: dict[str, float] = {}
    for op in graph.ops:
        for i, v in enumerate(op.operands):
            sample = op.operand_spec(i).sample
            if v is None or not sample or ((v in ranges or v in scales) and sample != "classes"):
                continue
            if sample == "weights":
                scales[v] = 1.0 / math.sqrt(op.attrs["hidden_size"])
            elif sample == "lengths":
                x = graph.types.get(op.operands[0]) if op.operands else None
                ranges[v] = (1, x.shape[0] if x is not None and x.rank >= 1 and x.shape[0] is not None else 1)
            elif sample == "classes":
                x = graph.types.get(op.operands[i - 1] or "") if i else None
                c = x.shape[1] if x is not None and x.rank >= 2 else None
                lo, hi = ranges.get(v, (0, (2 if c is None else c) - 1))  # a '?' dim is generated as 2
                hi = min(hi, (2 if c is None else c) - 1)  # labels read by several ops: valid for each
                if hi >= lo:
                    ranges[v] = (lo, hi)
    out = {}
    for inp in graph.inputs:
        t = inp.type
        shape = tuple(2 if d is None else d for d in t.shape)
        dt = t.dtype.numpy
        try:
            if dt.kind == "f":
                a = scales.get(inp.name)
                out[inp.name] = (rng.standard_normal(shape) if a is None else rng.uniform(-a, a, shape)).astype(dt)
            elif dt.kind == "b":
                out[inp.name] = rng.random(shape) < 0.5
            else:
                lo, hi = ranges.get(inp.name, (0, 9))
                out[inp.name] = rng.integers(lo, hi + 1, size=shape).astype(dt)
        except MemoryError:
            from ..fileio import human_bytes
            n = int(np.prod(shape, dtype=object)) * dt.itemsize
            raise InputError(Diagnostic(f"cannot generate input {inp.name} ({t.dtype} {list(shape)}, "
                                        f"{human_bytes(n)}): out of memory", inp.span, graph.source,
                                        filename=graph.source.filename if graph.source else None)) from None
    return out


def complete_inputs(graph: Graph, given: Mapping[str, np.ndarray],
                    seed: int) -> tuple[dict[str, np.ndarray], list[str]]:
    """``given`` plus, for each graph input it lacks, the value ``demo_inputs(graph, seed)`` draws for it (so
    a generated input is the same whether or not others were given); returns (inputs, generated names)."""
    generated = [i.name for i in graph.inputs if i.name not in given]
    demo = demo_inputs(graph, seed) if generated else {}
    inputs = {i.name: given[i.name] if i.name in given else demo[i.name] for i in graph.inputs}
    inputs.update((k, v) for k, v in given.items() if k not in inputs)  # check_inputs names the strays
    return inputs, generated


def check_generated(exe: "Executable", inputs: Mapping[str, np.ndarray], generated: list[str],
                    filename: str) -> None:
    """Validate ``inputs`` now if a generated one has a '?' dimension: it was drawn as 2, which may not fit
    the graph (or the given inputs), and the error should say so."""
    types = {i.name: i.type for i in exe.graph.inputs}
    if not any(None in types[n].shape for n in generated):
        return
    try:
        exe.check_inputs(inputs)
    except InputError as e:
        e.diagnostics.append(Diagnostic("generated inputs use 2 for every '?' dimension, which does not "
                                        "fit this graph; give real inputs with --inputs or --input",
                                        filename=filename))
        raise


def load_inputs(npzs: Union[str, Sequence[str], None], pairs: list[str]) -> dict[str, np.ndarray]:
    """The arrays of every ``--inputs`` archive (a key in two of them is an error naming both) and of
    every ``--input NAME=FILE.npy``."""
    arrays: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    for npz in [npzs] if isinstance(npzs, str) else (npzs or []):
        for key, a in read_npz(npz, "--inputs", " (use --input tN=FILE.npy)").items():
            if key in arrays:
                raise InputError(Diagnostic(f"--inputs: {key!r} is in both {origin[key]} and {npz}; give each "
                                            "input once", filename=npz))
            arrays[key] = a
            origin[key] = npz
    seen: set[str] = set()
    for pair in pairs:
        name, _, path = pair.partition("=")
        if name in seen:
            raise InputError(Diagnostic(f"--input {name} is given twice", filename=path))
        seen.add(name)
        if name in arrays:
            raise InputError(Diagnostic(f"--input {name}: {name} is also in the --inputs archive", filename=path))
        a = load_array_file(path, f"--input {name}")
        if isinstance(a, np.lib.npyio.NpzFile):
            a.close()
            raise InputError(Diagnostic(f"--input {name}: expected a .npy array, got an .npz archive",
                                        filename=path))
        arrays[name] = a
    return arrays
