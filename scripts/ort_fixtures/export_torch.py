"""Export a few small PyTorch models to ONNX: the PyTorch-exported forward models
among the fixtures (real exporter output: `fc1.weight` names, `Constant` nodes,
`/fc1/Gemm_output_0` value names, the erf-written GELU, LSTM with reordered gates).

Needs torch (and onnx), not onnxruntime; run it with the project's venv:

    python scripts/ort_fixtures/export_torch.py

It writes scripts/ort_fixtures/torch_models/*.onnx (committed, a few KB each), which
generate.py (in the ORT venv, without torch) turns into fixtures like the others.
Uses the TorchScript exporter (dynamo=False), which needs no onnxscript, and for the `*_dynamo`
models torch.export + onnxscript (dynamo=True, optimize=False).  The issue #31 models (transformer
encoder layer, causal multi-head attention, embedding / layer norm / batch norm / dropout) were
exported with torch 2.13.0 and onnxscript 0.7.2; `export_torch.py --old` re-exports only the
earlier ones.  Dropout nodes get a `seed` (PyTorch writes none) and every LayerNormalization and
training-mode Dropout all its outputs (ORT's gradient builders need them).
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path

import onnx
import torch
from torch import nn

OUT = Path(__file__).resolve().parent / "torch_models"


class MLP(nn.Module):
    def __init__(self, act: nn.Module, d_out: int = 3):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.act = act
        self.fc2 = nn.Linear(8, d_out)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class MLPWithLoss(nn.Module):
    """The loss inside the model: exported as SoftmaxCrossEntropyLoss."""

    def __init__(self):
        super().__init__()
        self.net = MLP(nn.Tanh(), d_out=5)
        self.loss = nn.CrossEntropyLoss(ignore_index=1)

    def forward(self, x, labels):
        return self.loss(self.net(x), labels)


class LSTMHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y)


class ConvFree(nn.Module):
    """Flatten / LogSoftmax / Softmax as PyTorch writes them."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 5)

    def forward(self, x):
        z = self.fc(torch.flatten(x, 1))
        return torch.log_softmax(z, dim=-1) + torch.softmax(z, dim=1)


class EmbedNormMLP(nn.Module):
    """nn.Embedding, nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Dropout, nn.LayerNorm: ids [8] -> logits [8, 5]."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 16)
        self.ln = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 16, bias=False)
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, ids):
        # no constant shift (a bias, a layer norm's bias) before the batch norm: its gradient would be zero
        return self.fc2(self.ln(self.drop(torch.relu(self.bn(self.fc1(self.emb(ids)))))))


class CausalMHA(nn.Module):
    """nn.MultiheadAttention self-attention with a causal bool mask (True = masked), as a GPT writes it."""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)
        self.register_buffer("mask", torch.triu(torch.ones(8, 8, dtype=torch.bool), diagonal=1))

    def forward(self, x):
        y, _ = self.mha(x, x, x, attn_mask=self.mask, need_weights=False)
        return y


class Encoder(nn.Module):
    """One nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), as a model holds it.  Exported bare,
    torch 2.13's TorchScript exporter fills in the layer's default arguments and traces `is_causal=False`
    as a tensor, and scaled_dot_product_attention then refuses it (TypeError: argument 'is_causal' must
    be bool, not Tensor); inside a module whose forward takes only x it exports."""

    def __init__(self, dropout: float):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=dropout, batch_first=True)

    def forward(self, x):
        return self.layer(x)


def _seed_dropouts(m: onnx.ModelProto) -> None:
    """PyTorch writes Dropout without a `seed`; ORT then seeds its generator from the clock and the
    fixtures would change from run to run.  Give every Dropout a fixed seed (7, 8, ... in node order)."""
    k = 7
    for node in m.graph.node:
        if node.op_type == "Dropout" and not any(a.name == "seed" for a in node.attribute):
            node.attribute.append(onnx.helper.make_attribute("seed", k))
            k += 1


def _all_outputs(m: onnx.ModelProto) -> None:
    """PyTorch writes LayerNormalization with Y only and a training-mode Dropout without its mask; ORT
    1.19.2's gradient builders read those outputs (LayerNormalizationGrad takes Mean and InvStdDev,
    DropoutGrad the mask) and fail with `i < node_->OutputDefs().size() was false`.  Name them, as
    ORTModule's own export does.  (The attention-weight dropout of nn.MultiheadAttention comes out of
    the TorchScript exporter as `Dropout(x, ratio)` without `training_mode`, i.e. an identity even in a
    training-mode export; it keeps that meaning here and only gets its mask output.)"""
    for node in m.graph.node:
        if node.op_type == "LayerNormalization" and len(node.output) == 1:
            node.output.extend([node.output[0] + "_mean", node.output[0] + "_inv_std_dev"])
        if node.op_type == "Dropout" and len(node.output) == 1:
            node.output.append(node.output[0] + "_mask")


def _cast_like_to_cast(m: onnx.ModelProto) -> None:
    """The dynamo exporter scales attention by `CastLike(1 / sqrt(head_dim), q)`; ORT 1.19.2 has no
    gradient builder for CastLike ("The gradient builder has not been registered: CastLike"), and q, its
    second input, is on the differentiable path.  `CastLike(x, like)` is `Cast(x, to=<like's dtype>)`:
    write it so (the dtype from ONNX shape inference)."""
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(
        inferred.graph.input) + list(inferred.graph.output)}
    types.update({t.name: t.data_type for t in m.graph.initializer})
    for node in m.graph.node:
        if node.op_type == "CastLike" and node.domain in ("", "ai.onnx"):
            to = types[node.input[1]]
            del node.input[1:]
            saturate = [a for a in node.attribute if a.name == "saturate"]
            del node.attribute[:]
            node.attribute.extend(saturate + [onnx.helper.make_attribute("to", to)])
            node.op_type = "Cast"


def _strip_metadata(m: onnx.ModelProto) -> None:
    """The dynamo exporter annotates every node and value with its Python stack and FX names
    (`metadata_props`, `doc_string`): two thirds of the file, and paths of this machine."""
    for node in m.graph.node:
        node.doc_string = ""
        del node.metadata_props[:]
    for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output) + list(m.graph.initializer):
        v.doc_string = ""
        del v.metadata_props[:]
    del m.metadata_props[:]
    m.doc_string = ""


def _train_batchnorm(m: onnx.ModelProto) -> None:
    """torch 2.13's dynamo exporter writes a training-mode nn.BatchNorm1d as an inference-mode
    BatchNormalization (no `training_mode`, running statistics used).  ORT's training graph turns every
    BatchNormalization into BatchNormInternal, which normalizes with the batch statistics, so ORT's
    loss would not be the exported model's.  Write it as the TorchScript exporter does: training_mode=1
    and the two running-statistics outputs."""
    for node in m.graph.node:
        if node.op_type == "BatchNormalization" and not any(a.name == "training_mode" for a in node.attribute):
            node.attribute.append(onnx.helper.make_attribute("training_mode", 1))
            node.output.extend([node.output[0] + "_running_mean", node.output[0] + "_running_var"])


def _two_output_sce(m: onnx.ModelProto) -> None:
    """PyTorch writes SoftmaxCrossEntropyLoss with the loss output only; ORT 1.19.2's
    gradient builder needs the log-probability output too (it fails with
    `i < node_->OutputDefs().size() was false`), which is why ORTModule exports the
    loss with its own symbolic.  Add the second output the same way."""
    for node in m.graph.node:
        if node.op_type == "SoftmaxCrossEntropyLoss" and len(node.output) == 1:
            node.output.append(node.output[0] + "_log_prob")


def _export(name: str, model: nn.Module, args: tuple, input_names, opset: int = 17, *, std: float = 0.5,
            training: bool = False, dynamo: bool = False) -> None:
    """training: export in training mode (Dropout with training_mode true, BatchNormalization with
    training_mode=1), without constant folding (which training mode forbids).  dynamo: torch.export +
    onnxscript (opset 18 at least) instead of the TorchScript exporter."""
    torch.manual_seed(0)
    for p in model.parameters():
        nn.init.normal_(p, std=std)
    model.train(training)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            # optimize=False: the default optimizer folds BatchNormalization into the Gemm before it even
            # in training mode (the batch statistics are lost) and constant-folds slices and transposes of
            # parameters (in_proj_weight, linear1.weight) into unnamed `val_*` tensors
            prog = torch.onnx.export(model, args, input_names=list(input_names), output_names=["out"],
                                     opset_version=opset, dynamo=True, optimize=False, verbose=False)
            m = prog.model_proto
            _cast_like_to_cast(m)
            _strip_metadata(m)
            if training:
                _train_batchnorm(m)
        else:
            f = io.BytesIO()
            mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
            torch.onnx.export(model, args, f, input_names=list(input_names), output_names=["out"],
                              opset_version=opset, dynamo=False, do_constant_folding=not training, training=mode)
            m = onnx.load_from_string(f.getvalue())
    m.ir_version = min(m.ir_version, 8 if not dynamo else 10)
    _two_output_sce(m)
    _all_outputs(m)
    _seed_dropouts(m)
    m.producer_name = f"pytorch {torch.__version__} (scripts/ort_fixtures/export_torch.py)"
    onnx.checker.check_model(m, full_check=True)
    OUT.mkdir(exist_ok=True)
    onnx.save(m, OUT / f"{name}.onnx")
    print(name, sorted({n.op_type for n in m.graph.node}), [i.name for i in m.graph.initializer])


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 6)
    _export("torch_mlp_gelu", MLP(nn.GELU()), (x,), ["X"])
    _export("torch_mlp_gelu_tanh", MLP(nn.GELU(approximate="tanh")), (x,), ["X"])
    _export("torch_mlp_relu", MLP(nn.ReLU()), (x,), ["X"])
    _export("torch_mlp_ce_in_model", MLPWithLoss(), (x, torch.tensor([0, 1, 2, 4])), ["X", "labels"])
    _export("torch_lstm", LSTMHead(), (torch.randn(5, 2, 3),), ["X"])
    _export("torch_flatten_softmax", ConvFree(), (torch.randn(4, 3, 4),), ["X"], opset=13)
    if len(sys.argv) > 1 and sys.argv[1] == "--old":
        return
    # issue #31: transformer pieces (the TorchScript exports, then the dynamo ones)
    xs = torch.randn(2, 8, 16)
    ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])

    _export("torch_encoder_layer_train", Encoder(0.1), (xs,), ["X"], std=0.2, training=True)
    _export("torch_encoder_layer_eval", Encoder(0.0), (xs,), ["X"], std=0.2)
    _export("torch_embed_ln_bn_dropout", EmbedNormMLP(), (ids,), ["ids"], std=0.3, training=True)
    _export("torch_mha_causal", CausalMHA(), (xs,), ["X"], std=0.2)
    _export("torch_encoder_layer_dynamo", Encoder(0.0), (xs,), ["X"], opset=18, std=0.2, dynamo=True)
    _export("torch_encoder_layer_train_dynamo", Encoder(0.1), (xs,), ["X"], opset=18, std=0.2, training=True,
            dynamo=True)
    _export("torch_embed_ln_bn_dropout_dynamo", EmbedNormMLP(), (ids,), ["ids"], opset=18, std=0.3,
            training=True, dynamo=True)


if __name__ == "__main__":
    main()
