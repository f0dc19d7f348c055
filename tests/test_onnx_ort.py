"""Training graphs ONNX Runtime built (tests/data/onnx, written by scripts/ort_fixtures/generate.py with
onnxruntime-training 1.19.2), imported by gradir and run with ORT's inputs: every output within 1e-5
(relative to the output's largest magnitude) of ORT's own results.

* form a: ``generate_artifacts``' training model (its ``InPlaceAccumulatorV2`` nodes stripped on import);
* form b: ORT's gradient graph without accumulators;
* forward: the plain forward model with the loss, differentiated by ``gradir grad``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import gradir
from gradir.interop.onnx import import_onnx

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "onnx")
with open(os.path.join(DATA, "manifest.json"), encoding="utf-8") as _f:
    MANIFEST = json.load(_f)
ENTRIES = {f"{e['case']}/{e['form']}": e for e in MANIFEST["entries"]}

# gradir has no Abs, Reciprocal, Sin, Cos, Sign: the import must list every such node at once
UNSUPPORTED = {"elementwise_misc"}
# ORT gives ai.onnx Gelu(approximate="tanh") the exact GeluGrad, which is not its derivative; gradir grad
# derives the true one (FastGeluGrad), checked against finite differences below instead
NOT_THE_DERIVATIVE = {"mlp_gelu_onnx20_tanh/forward"}
# Issue #31's whole networks: they import once their ops exist (Gather/GatherGrad, LayerNormalization/Grad, Split,
# Concat, Where, Dropout/DropoutGrad, BatchNormInternal/BatchNormalizationGrad; the forward forms also Slice, Trilu,
# Equal, Cast, Mod and PyTorch's other shape arithmetic).  Expected to fail until then (strict: a case that starts
# passing fails here, so that its entry is removed as its ops land).  Cases with Dropout list ORT's masks in the
# manifest entry's "masks" (masks.npz, keyed by the Dropout node's mask output name).
PENDING_OPS = {
    "gpt_block", "gpt_block_slice_trilu", "gpt_block_opset18", "mlp_bn_dropout", "mlp_ln_dropout", "lstm_tagger",
    "torch_encoder_layer_train", "torch_encoder_layer_eval", "torch_embed_ln_bn_dropout", "torch_mha_causal",
    "torch_encoder_layer_dynamo", "torch_encoder_layer_train_dynamo", "torch_embed_ln_bn_dropout_dynamo",
}


def _arrays(paths: list[str]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for p in paths:
        with np.load(os.path.join(DATA, p), allow_pickle=False) as z:
            out.update({k: z[k] for k in z.files})
    return out


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, what
    scale = max(float(np.abs(want).max()), 1e-30) if want.size else 1.0
    err = float(np.abs(got.astype(np.float64) - want).max()) if want.size else 0.0
    assert err <= 1e-5 * scale, f"{what}: max error {err:.3g} is more than 1e-5 of max |ORT| {scale:.3g}"


def _forward_gradients(e: dict, graph: gradir.Graph, inputs: dict) -> dict[str, np.ndarray]:
    feed = {k: v for k, v in inputs.items() if k in {i.label for i in graph.inputs}}
    out = dict(gradir.compile(graph).run(feed))
    bwd = gradir.grad(graph, wrt=e["params"])
    for c in bwd.inputs:
        if c.label and c.label.startswith("cotangent("):
            feed[c.label] = np.ones(c.type.shape, c.type.dtype.numpy)
    grads = gradir.compile(bwd).run(feed)
    out.update({k[len("grad("):-1] + "_grad": v for k, v in grads.items()})
    return out


def _param(key: str):
    if ENTRIES[key]["case"] in PENDING_OPS:
        return pytest.param(key, marks=pytest.mark.xfail(strict=True, reason="issue #31: its ops are not in yet"))
    return key


def test_pending_cases_are_in_the_manifest() -> None:
    assert PENDING_OPS <= {e["case"] for e in ENTRIES.values()}


@pytest.mark.parametrize("key", [_param(k) for k in sorted(ENTRIES) if ENTRIES[k]["case"] not in UNSUPPORTED])
def test_ort_training_graph_imports_and_matches_ort(key: str) -> None:
    e = ENTRIES[key]
    imported = import_onnx(os.path.join(DATA, e["model"]))
    inputs = {**_arrays(e["inputs"]), **imported.inputs}
    ref = _arrays([e["reference"]])
    if e["form"] == "forward":
        out = _forward_gradients(e, imported.graph, inputs)
    else:
        out = gradir.compile(imported.graph).run(inputs)
        assert set(out) == set(ref), "outputs keyed by their ONNX names: the loss and each <param>_grad"
    if key in NOT_THE_DERIVATIVE:
        res = gradir.gradcheck(imported.graph, inputs={k: v for k, v in inputs.items()
                                                         if k in {i.label for i in imported.graph.inputs}},
                               wrt=e["params"])
        assert res.ok, res
        _close(out[e["loss"]], ref[e["loss"]], "loss")
        return
    for k in ref:
        _close(out[k], ref[k], k)


def test_accumulators_are_stripped_and_gradients_output_directly() -> None:
    e = ENTRIES["mlp_relu/a"]
    m = import_onnx(os.path.join(DATA, e["model"]))
    labels = [lb for lb in m.graph.output_labels]
    assert labels == [e["loss"]] + [f"{p}_grad" for p in e["params"]] or sorted(labels) == sorted(
        [e["loss"]] + [f"{p}_grad" for p in e["params"]])
    assert not any("accumulation" in (i.label or "") or i.label == "lazy_reset_grad" for i in m.graph.inputs)
    assert any("InPlaceAccumulatorV2" in n for n in m.notes)
    assert "InPlace" not in m.graph.to_text()


@pytest.mark.parametrize("form", ["a", "b", "forward"])
def test_unsupported_nodes_are_all_listed(form: str) -> None:
    e = ENTRIES[f"elementwise_misc/{form}"]
    with pytest.raises(gradir.OnnxError) as err:
        import_onnx(os.path.join(DATA, e["model"]))
    msg = str(err.value)
    for op in ("Abs", "Reciprocal", "Sin", "Cos"):
        assert f"ai.onnx {op})" in msg, op
    assert "Traceback" not in msg
