"""Issue #31's networks (tests/data/onnx: GPT-style blocks, MLPs with BatchNormalization / LayerNormalization
and seeded Dropout, an LSTM tagger with an embedding, PyTorch's exported TransformerEncoderLayer,
MultiheadAttention and Embedding + BatchNorm1d + Dropout + LayerNorm): each forward model, imported, has
gradients (``gradir grad``) that pass ``gradir gradcheck`` (float64 central finite differences) with
respect to every parameter ORT trains.  Their ORT numbers are checked in test_onnx_ort.py; this is the
independent reference.  The Dropout masks are drawn by ORT's generator from the nodes' seeds, the same for
every evaluation, so the finite differences see one function.
"""

from __future__ import annotations

import os

import pytest

import gradir
from gradir.interop.onnx import import_onnx
from test_onnx_ort import DATA, ENTRIES, _arrays

NETWORKS = ["gpt_block", "gpt_block_opset18", "gpt_block_slice_trilu", "mlp_bn_dropout", "mlp_ln_dropout",
            "lstm_tagger", "torch_encoder_layer_train", "torch_encoder_layer_eval", "torch_encoder_layer_dynamo",
            "torch_encoder_layer_train_dynamo", "torch_mha_causal", "torch_embed_ln_bn_dropout",
            "torch_embed_ln_bn_dropout_dynamo"]


def test_the_networks_are_in_the_manifest() -> None:
    assert all(f"{n}/forward" in ENTRIES for n in NETWORKS)


@pytest.mark.parametrize("case", NETWORKS)
def test_forward_network_differentiates_and_passes_gradcheck(case: str) -> None:
    e = ENTRIES[f"{case}/forward"]
    imported = import_onnx(os.path.join(DATA, e["model"]))
    labels = {i.label for i in imported.graph.inputs}
    inputs = {k: v for k, v in {**_arrays(e["inputs"]), **imported.inputs}.items() if k in labels}
    report = gradir.gradcheck(imported.graph, inputs=inputs, wrt=e["params"], directions=2)
    assert report.ok, report.table()
