"""Export PyTorch's transformer-era layers to ONNX with both of its exporters, as a user would: what the
importer must read (shape plumbing folded at import, the tanh-GELU fused into FastGelu, every op it
lacks listed in one error).

Needs torch 2.x with onnxscript (for ``dynamo=True``) and onnx, not onnxruntime:

    python scripts/ort_fixtures/export_torch_layers.py

It writes ``scripts/ort_fixtures/torch_models/layer_<layer>_<exporter>[_train].onnx`` (committed, a few KB
each): ``ts`` is the TorchScript exporter (``dynamo=False``, opset 17), ``dyn`` the dynamo exporter
(``dynamo=True``, opset 18).  ``_train`` models are exported in training mode (Dropout and BatchNorm as
they train: ``training=TrainingMode.TRAINING`` for TorchScript, ``model.train()`` for dynamo).
``layer_encoder_ts_dynbatch`` has a symbolic batch dimension (``batch``), to import with ``--dim``.
"""

from __future__ import annotations

import io
import math
import warnings
from pathlib import Path

import onnx
import torch
from torch import nn

OUT = Path(__file__).resolve().parent / "torch_models"


class Attention(nn.Module):
    """Self-attention with ``nn.MultiheadAttention`` (query = key = value)."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)

    def forward(self, ids):
        return self.emb(ids)


class HandTanhGelu(nn.Module):
    """GPT-2's MLP with its hand-written tanh-GELU (``torch.pow(x, 3)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)
        self.proj = nn.Linear(16, 8)

    def forward(self, x):
        h = self.fc(x)
        h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * torch.pow(h, 3))))
        return self.proj(h)


def _mlp_tanh() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 8))


class Encoder(nn.Module):
    """``nn.TransformerEncoderLayer`` called with ``is_causal=False`` spelled out: torch 2.13's TorchScript
    exporter traces the layer's default into a tensor and fails (``scaled_dot_product_attention(): argument
    'is_causal' must be bool, not Tensor``) when it is left to its default."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.1,
                                                batch_first=True)

    def forward(self, x):
        return self.layer(x, is_causal=False)


def _encoder() -> nn.Module:
    return Encoder()


def _export(name: str, model: nn.Module, args: tuple, input_names: list[str], *, dynamo: bool, train: bool = False,
            dynamic: dict | None = None) -> None:
    torch.manual_seed(0)
    model.train(train)
    opset = 18 if dynamo else 17
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            prog = torch.onnx.export(model, args, input_names=input_names, output_names=["out"],
                                     opset_version=opset, dynamo=True, verbose=False)
            m = prog.model_proto
            for n in m.graph.node:  # the exporter's stack traces and FX names: 2/3 of the file, not the model
                del n.metadata_props[:]
        else:
            f = io.BytesIO()
            mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL
            torch.onnx.export(model, args, f, input_names=input_names, output_names=["out"], opset_version=opset,
                              dynamo=False, training=mode, do_constant_folding=not train,
                              dynamic_axes=dynamic)
            m = onnx.load_from_string(f.getvalue())
    m.producer_name = f"pytorch {torch.__version__} (scripts/ort_fixtures/export_torch_layers.py)"
    onnx.checker.check_model(m, full_check=True)
    OUT.mkdir(exist_ok=True)
    onnx.save(m, OUT / f"layer_{name}.onnx")
    print(name, sorted({n.op_type for n in m.graph.node}))


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    x8 = torch.randn(2, 5, 8)
    ids = torch.tensor([[1, 2, 3], [4, 5, 9]])
    xb = torch.randn(4, 6)
    for dynamo in (False, True):
        tag = "dyn" if dynamo else "ts"
        _export(f"encoder_{tag}", _encoder(), (x,), ["X"], dynamo=dynamo)
        _export(f"encoder_{tag}_train", _encoder(), (x,), ["X"], dynamo=dynamo, train=True)
        _export(f"mha_{tag}", Attention(), (x,), ["X"], dynamo=dynamo)
        _export(f"embedding_{tag}", Embed(), (ids,), ["ids"], dynamo=dynamo)
        _export(f"layernorm_{tag}", nn.LayerNorm(16), (x,), ["X"], dynamo=dynamo)
        _export(f"dropout_{tag}_train", nn.Dropout(0.25), (x,), ["X"], dynamo=dynamo, train=True)
        _export(f"batchnorm_{tag}", nn.BatchNorm1d(6), (xb,), ["X"], dynamo=dynamo)
        _export(f"batchnorm_{tag}_train", nn.BatchNorm1d(6), (xb,), ["X"], dynamo=dynamo, train=True)
        _export(f"gelu_tanh_{tag}", _mlp_tanh(), (x8,), ["X"], dynamo=dynamo)
        _export(f"gelu_pow_{tag}", HandTanhGelu(), (x8,), ["X"], dynamo=dynamo)
    _export("encoder_ts_dynbatch", _encoder(), (x,), ["X"], dynamo=False, dynamic={"X": {0: "batch"}})


if __name__ == "__main__":
    main()
