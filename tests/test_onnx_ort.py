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
# PyTorch's attention-weight Dropout comes out of the TorchScript exporter as Dropout(x, ratio) with no
# training_mode: ONNX's identity.  ORT's DropoutGrad does not read training_mode, so ORT's own reference scales
# that gradient by 1 / (1 - ratio) = 1 / 0.9: its q-projection gradients are 11% too large.  In forms a and b
# gradir runs ORT's DropoutGrad as ORT does (the same numbers); gradir grad derives the true gradient (a
# DropoutGrad with ratio 0), checked against finite differences instead.
NOT_THE_DERIVATIVE |= {"torch_encoder_layer_train/forward", "torch_encoder_layer_train_dynamo/forward"}
# ORT's MaxPoolGrad reads Indices row-major whatever storage_order says: of a storage_order=1 MaxPool its gradient
# is not the derivative (forms a and b reproduce it; gradir grad scatters by a row-major MaxPool's Indices)
NOT_THE_DERIVATIVE |= {"cnn_maxpool_storage_order/forward"}
# the gradients where ORT's reference is not the derivative; every other one must still be ORT's
ORT_NOT_THE_DERIVATIVE = {"torch_encoder_layer_train": ("layer.self_attn.in_proj_weight_grad",
                                                        "layer.self_attn.in_proj_bias_grad"),
                          "torch_encoder_layer_train_dynamo": ("layer.self_attn.in_proj_weight_grad",
                                                               "layer.self_attn.in_proj_bias_grad"),
                          "cnn_maxpool_storage_order": ("conv1.weight_grad", "conv1.bias_grad")}


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


@pytest.mark.parametrize("key", [k for k in sorted(ENTRIES) if ENTRIES[k]["case"] not in UNSUPPORTED])
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
        if e["case"] in ORT_NOT_THE_DERIVATIVE:
            for k in set(ref) - set(ORT_NOT_THE_DERIVATIVE[e["case"]]):
                _close(out[k], ref[k], k)
            for k in ORT_NOT_THE_DERIVATIVE[e["case"]]:  # gradir's, right by gradcheck, is not ORT's
                assert not np.allclose(out[k], ref[k], rtol=1e-3, atol=0), k
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
