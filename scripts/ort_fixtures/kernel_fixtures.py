"""One-node reference fixtures: ONNX Runtime's own CPU kernels (training build 1.19.2) on fixed inputs.

Run with the python of the venv that scripts/ort_fixtures/setup_venv.sh makes:

    ../venv-ort/bin/python scripts/ort_fixtures/kernel_fixtures.py FAMILY [FAMILY ...] [-o tests/data/onnx/kernels]

Each family is a module ``kernel_cases_<FAMILY>.py`` beside this file with ``CASES: list[Case]``.
For every case it writes, in OUT/<FAMILY>/:

  <name>.onnx   a model of the one node; the inputs named in ``Case.static`` (shapes, axes, starts,
                split sizes, ratios: what gradir takes as attributes) are initializers, so an importer
                folds them; the others are graph inputs
  <name>.npz    ``in.<input>`` for every graph input and ``out.<output>`` for every output: ORT's
                results from a single-threaded InferenceSession

``tests/test_ort_kernels.py`` imports every model with gradir, runs it on the ``in.`` arrays and
compares each ``out.`` within 1e-5 of its largest magnitude.  Deterministic: the inputs are the
cases' own arrays, and the npz files have fixed timestamps (generate.save_npz).
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

IR_VERSION = 8
MS_DOMAIN = "com.microsoft"


@dataclass
class Case:
    """One node of ``op_type`` in ``domain`` ("" for ai.onnx, "com.microsoft" for ORT's ops).

    ``inputs`` maps each input name, in the node's input order, to its array (``None`` for an omitted
    optional input, written as an empty name); ``outputs`` are the node's output names (``""`` for an
    omitted optional one).  ``static`` names inputs written as initializers.  ``output_types`` gives the
    dtype of outputs whose type ORT cannot infer (InvertibleLayerNormalizationGrad's X_grad): they are declared
    with it (shape left open); ``output_shapes`` gives the shape of outputs whose shape ORT's kernel reads from the
    graph (MaxPoolGrad's and AveragePoolGrad's dX); the others are typed by ORT's inference."""

    name: str
    op_type: str
    domain: str
    inputs: dict[str, Any]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    static: tuple[str, ...] = ()
    opset: int = 17
    output_types: dict[str, Any] = field(default_factory=dict)
    output_shapes: dict[str, list[int]] = field(default_factory=dict)


def _elem_type(a: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def build_model(case: Case) -> onnx.ModelProto:
    node_inputs, graph_inputs, inits = [], [], []
    for name, arr in case.inputs.items():
        if arr is None:
            node_inputs.append("")
            continue
        arr = np.asarray(arr)
        node_inputs.append(name)
        if name in case.static:
            inits.append(numpy_helper.from_array(arr, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, _elem_type(arr), list(arr.shape)))
    node = helper.make_node(case.op_type, node_inputs, list(case.outputs), name=case.name,
                            domain=case.domain or None, **case.attrs)
    outputs = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.dtype(case.output_types[o])),
                                             case.output_shapes.get(o))
               if o in case.output_types else onnx.ValueInfoProto(name=o)  # typed by ORT's inference
               for o in case.outputs if o]
    graph = helper.make_graph([node], case.name, graph_inputs, outputs, inits)
    imports = [helper.make_opsetid("", case.opset)]
    if case.domain == MS_DOMAIN:
        imports.append(helper.make_opsetid(MS_DOMAIN, 1))
    model = helper.make_model(graph, opset_imports=imports, producer_name="gradir-ort-kernel-fixtures")
    model.ir_version = IR_VERSION
    return model


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def write_family(family: str, out: Path) -> list[str]:
    from generate import save_npz  # the training fixtures' byte-stable npz writer

    mod = importlib.import_module(f"kernel_cases_{family}")
    d = out / family
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    written = []
    names = [c.name for c in mod.CASES]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SystemExit(f"kernel_cases_{family}: duplicate case names {sorted(dup)}")
    for case in mod.CASES:
        model = build_model(case)
        feeds = {k: np.asarray(v) for k, v in case.inputs.items() if v is not None and k not in case.static}
        results = run(model, feeds)
        # the outputs typed as ORT computed them, so that the model passes onnx.checker
        del model.graph.output[:]
        model.graph.output.extend(helper.make_tensor_value_info(o, _elem_type(results[o]), list(results[o].shape))
                                  for o in case.outputs if o)
        onnx.checker.check_model(model)
        onnx.save(model, d / f"{case.name}.onnx")
        save_npz(d / f"{case.name}.npz", {**{f"in.{k}": v for k, v in feeds.items()},
                                          **{f"out.{k}": v for k, v in results.items()}})
        written.append(case.name)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("families", nargs="+", help="kernel_cases_<FAMILY>.py modules beside this script")
    ap.add_argument("-o", "--out", default=str(HERE.parent.parent / "tests" / "data" / "onnx" / "kernels"))
    args = ap.parse_args(argv)
    for fam in args.families:
        names = write_family(fam, Path(args.out))
        print(f"{fam}: {len(names)} cases -> {Path(args.out) / fam}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
