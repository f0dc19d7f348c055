"""ONNX Runtime's training graph of the GPT block of ``benchmarks/gpt_case.py``, for ``bench_graphs.py``'s
``gpt_ort`` graph (issue [transformer], "Speed": the training step timed from ``gradir grad`` and from
ORT's training graph).

Regenerate (the ORT venv of ``setup_venv.sh``: onnxruntime-training 1.19.2, onnx 1.16.2, numpy 1.26):

    /tmp/venv-ort-export/bin/python scripts/ort_fixtures/gpt_bench_graph.py [--sizes full,quick,tiny]

For each size of ``gpt_case.GPT_SIZES`` it writes ``benchmarks/data/gpt_ort_<size>.onnx``: the forward
model of exactly ``gpt_case.gpt``'s function (same parameter names, same math: ``Gather`` of the token
embedding, the learned positions added, ``LayerNormalization``, separate Q/K/V projections, ``Mul`` by
1/sqrt(head size), the additive causal mask (a constant [T, T] of 0 and -inf), ``Softmax(axis=-1)``,
``com.microsoft`` ``Gelu`` (the erf GELU that gpt_case's ``Gelu`` is), residuals, the final LayerNorm, the
projection tied to the embedding table, the mean ``SoftmaxCrossEntropyLoss``), handed to
``generate_artifacts`` (``generate.build_artifacts``), with onnxblock's accumulation step switched off
(form b: inputs ``ids``, ``labels``, then every parameter; outputs the loss and ``<param>_grad``).  The
key bias ``bk`` is a frozen parameter (an input, not differentiated), as in gpt_case.  Parameters are
graph inputs, so even the full size's file holds only the mask and a few shape constants (checked:
under 1 MB).  Each graph is then run once by ORT (single-threaded InferenceSession) on gpt_case's own
inputs at that size, as a smoke check (finite loss and gradients).  Deterministic: rerunning writes the
same bytes.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "benchmarks"))
import generate  # noqa: E402  (sets up onnxruntime.training without torch)
import graph_cases  # noqa: E402,F401  (first: it imports gpt_case at its end)
import gpt_case  # noqa: E402

mk = helper.make_node
OUT = ROOT / "benchmarks" / "data"
MAX_BYTES = 1 << 20
FROZEN = ["bk"]


def _c(name: str, value, dtype) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def forward_model(B: int, T: int, C: int, H: int, M: int, V: int) -> onnx.ModelProto:
    """gpt_case.gpt_text's function as an ONNX model; the parameters are initializers (random values: the
    training graph takes them as inputs, so only their names, shapes and types matter)."""
    D = C // H
    rng = np.random.default_rng(0)
    shapes = {"wte": (V, C), "wpe": (T, C), "wq": (C, C), "wk": (C, C), "wv": (C, C), "wo": (C, C),
              "w1": (C, M), "b1": (M,), "w2": (M, C)}
    inits = [_c(k, rng.standard_normal(shapes.get(k, (C,))) * 0.02, np.float32) for k in gpt_case.PARAMS]
    consts = [_c("mask", np.triu(np.full((T, T), -np.inf), 1), np.float32),
              _c("att_scale", 1 / math.sqrt(D), np.float32),
              _c("heads_shape", [B, T, H, D], np.int64), _c("merge_shape", [B, T, C], np.int64),
              _c("logits_shape", [B * T, V], np.int64)]
    nodes = [mk("Gather", ["wte", "ids"], ["tok"], name="wte_gather", axis=0),
             mk("Add", ["tok", "wpe"], ["x0"], name="embed_add")]

    def layer_norm(x: str, p: str, out: str) -> None:
        # all three outputs: ORT 1.19.2's gradient builder reads Mean and InvStdDev from the forward node
        nodes.append(mk("LayerNormalization", [x, f"{p}_g", f"{p}_b"], [out, f"{p}_mean", f"{p}_inv_std_dev"],
                        name=p, axis=-1, epsilon=gpt_case.EPS))

    def linear(x: str, w: str, b: str, out: str) -> None:
        nodes.extend([mk("MatMul", [x, w], [f"{out}_mm"], name=f"{out}_matmul"),
                      mk("Add", [f"{out}_mm", b], [out], name=f"{out}_add")])

    layer_norm("x0", "ln1", "h1")
    for t in "qkv":
        linear("h1", f"w{t}", f"b{t}", f"{t}0")
        nodes.extend([mk("Reshape", [f"{t}0", "heads_shape"], [f"{t}1"], name=f"{t}_heads"),
                      mk("Transpose", [f"{t}1"], [t], name=f"{t}_t", perm=[0, 2, 1, 3])])
    nodes += [mk("Transpose", ["k"], ["kT"], name="k_tt", perm=[0, 1, 3, 2]),
              mk("MatMul", ["q", "kT"], ["s0"], name="qk_matmul"),
              mk("Mul", ["s0", "att_scale"], ["s1"], name="qk_scale"),
              mk("Add", ["s1", "mask"], ["s"], name="mask_add"),
              mk("Softmax", ["s"], ["p"], name="att_softmax", axis=-1),
              mk("MatMul", ["p", "v"], ["y0"], name="pv_matmul"),
              mk("Transpose", ["y0"], ["y1"], name="y_t", perm=[0, 2, 1, 3]),
              mk("Reshape", ["y1", "merge_shape"], ["y2"], name="y_merge")]
    linear("y2", "wo", "bo", "a")
    nodes.append(mk("Add", ["x0", "a"], ["x1"], name="resid1"))
    layer_norm("x1", "ln2", "h2")
    linear("h2", "w1", "b1", "f")
    nodes.append(mk("Gelu", ["f"], ["g"], name="gelu", domain="com.microsoft"))
    linear("g", "w2", "b2", "m")
    nodes.append(mk("Add", ["x1", "m"], ["x2"], name="resid2"))
    layer_norm("x2", "lnf", "hf")
    nodes += [mk("Transpose", ["wte"], ["wte_t"], name="tied_t", perm=[1, 0]),
              mk("MatMul", ["hf", "wte_t"], ["logits3"], name="lm_head"),
              mk("Reshape", ["logits3", "logits_shape"], ["logits"], name="logits_flat"),
              mk("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss", "log_prob"], name="sce",
                 reduction="mean")]
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [B, T]),
              helper.make_tensor_value_info("labels", TensorProto.INT64, [B * T])]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    graph = helper.make_graph(nodes, "gpt_block", inputs, outputs, inits + consts)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                          producer_name="gradir-ort-fixtures")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def build(size: str) -> Path:
    B, T, C, H, M, V = gpt_case.GPT_SIZES[size]
    model = forward_model(B, T, C, H, M, V)
    params = [k for k in gpt_case.PARAMS if k not in FROZEN]
    OUT.mkdir(parents=True, exist_ok=True)
    dest = OUT / f"gpt_ort_{size}.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        train, _, _ = generate.build_artifacts(model, params, FROZEN, ("own",), Path(tmp), accumulate=False)
        m = onnx.load(train)
    names = [o.name for o in m.graph.output]
    if names != ["loss"] + [f"{p}_grad" for p in params]:
        raise SystemExit(f"{size}: unexpected outputs {names}")
    wanted = ["ids", "labels"] + list(gpt_case.PARAMS)
    if sorted(i.name for i in m.graph.input) != sorted(wanted):
        raise SystemExit(f"{size}: unexpected inputs {[i.name for i in m.graph.input]}")
    onnx.checker.check_model(m)
    data = m.SerializeToString()
    if len(data) >= MAX_BYTES:
        raise SystemExit(f"{size}: {len(data)} bytes, not under {MAX_BYTES}: parameters left as initializers?")
    tmp_dest = dest.with_suffix(".onnx.tmp")
    tmp_dest.write_bytes(data)
    tmp_dest.replace(dest)
    # ORT runs it on gpt_case's own inputs (a smoke check: the graph is valid and its numbers finite)
    case = gpt_case.gpt(size, gather=True, layer_norm=True)
    _, label = gpt_case.gpt_text(B, T, C, H, M, V, True, True)
    feeds = {k: case.inputs[label[k]] for k in wanted}
    got = generate.run_session(dest, feeds)
    bad = [k for k, v in got.items() if not np.all(np.isfinite(v))]
    if bad:
        raise SystemExit(f"{size}: ORT's results are not finite: {bad}")
    ops = sorted({f"{n.domain + ':' if n.domain else ''}{n.op_type}" for n in m.graph.node})
    print(f"{dest.relative_to(ROOT)}: {len(data)} bytes, {len(m.graph.node)} nodes; ORT's loss {float(got['loss']):.6f}"
          f"\n   ops: {', '.join(ops)}")
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="tiny,quick,full", help="comma-separated, from full, quick, tiny")
    args = ap.parse_args(argv)
    for size in args.sizes.split(","):
        build(size.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
