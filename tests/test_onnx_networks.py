"""Issue #31's networks (tests/data/onnx: GPT-style blocks, MLPs with BatchNormalization / LayerNormalization
and seeded Dropout, an LSTM tagger with an embedding, PyTorch's exported TransformerEncoderLayer,
MultiheadAttention and Embedding + BatchNorm1d + Dropout + LayerNorm) and issue #32's (GRU classifiers and language
models, small CNNs with BatchNormalization, depthwise convolutions, Pad, pooling, 1-D and 3-D convolutions,
PyTorch's exported nn.GRU and nn.Conv2d CNN): each forward model, imported, has
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
            "torch_embed_ln_bn_dropout_dynamo",
            # issue #32
            "gru_classifier", "gru_classifier_lbr1", "gru_classifier_minimal", "gru_lm", "gru_lm_nobias",
            "torch_gru", "torch_gru_unfolded", "torch_gru_dynamo", "small_cnn", "cnn_bn", "cnn_dwsep",
            "cnn_pad_reflect_avgpool", "cnn_pad_constant_avgpool", "cnn_autopad_ceil", "cnn3d", "cnn1d", "torch_cnn",
            "torch_cnn_dynamo", "cnn_maxpool_storage_order", "cnn_resnet_block", "torch_gru_batch_first", "torch_cnn1d",
            "torch_cnn1d_dynamo"]


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


@pytest.mark.parametrize("case", ["cnn_pad_reflect_avgpool", "cnn_pad_constant_avgpool", "gru_classifier_lbr1",
                                  "torch_cnn1d"])
def test_forward_network_gradient_with_respect_to_its_input_passes_gradcheck(case: str) -> None:
    """ORT trains no input, so its references never reach a reflect Pad on X (ORT 1.19.2 has no gradient of one)
    nor a GRU's dX: gradir's, checked here against finite differences."""
    e = ENTRIES[f"{case}/forward"]
    imported = import_onnx(os.path.join(DATA, e["model"]))
    labels = {i.label for i in imported.graph.inputs}
    inputs = {k: v for k, v in {**_arrays(e["inputs"]), **imported.inputs}.items() if k in labels}
    report = gradir.gradcheck(imported.graph, inputs=inputs, wrt=["X"], directions=2)
    assert report.ok, report.table()


@pytest.mark.parametrize("case", ["gru_classifier", "torch_gru_unfolded", "small_cnn", "torch_cnn"])
def test_forward_network_differentiates_and_passes_gradcheck_on_the_command_line(case: str, tmp_path, capsys) -> None:
    """What a user types: ``gradir import`` the forward model (its initializers into NAME.inputs.npz), ``gradir
    grad``, then ``gradir gradcheck`` at the fixture's inputs and the model's parameters: exit 0 each."""
    from cli_runner import run_cli

    e = ENTRIES[f"{case}/forward"]
    fwd, bwd = tmp_path / f"{case}.gir", tmp_path / f"{case}_bwd.gir"
    assert run_cli(["import", os.path.join(DATA, e["model"]), "-o", fwd], capsys)[0] == 0
    assert run_cli(["grad", fwd, "-o", bwd], capsys)[0] == 0 and bwd.is_file()
    rc, out, err = run_cli(["gradcheck", fwd, "--inputs", os.path.join(DATA, e["inputs"][0]), "--inputs",
                            tmp_path / f"{case}.inputs.npz"], capsys)
    assert rc == 0, out + err
    assert all(p in out for p in e["params"]) and "FAIL" not in out
