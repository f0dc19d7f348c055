"""Export a few small PyTorch models to ONNX: the PyTorch-exported forward models
among the fixtures (real exporter output: `fc1.weight` names, `Constant` nodes,
`/fc1/Gemm_output_0` value names, the erf-written GELU, LSTM with reordered gates).

Needs torch (and onnx), not onnxruntime; run it with the project's venv:

    python scripts/ort_fixtures/export_torch.py

It writes scripts/ort_fixtures/torch_models/*.onnx (committed, a few KB each), which
generate.py (in the ORT venv, without torch) turns into fixtures like the others.
Uses the TorchScript exporter (dynamo=False), which needs no onnxscript.
"""

from __future__ import annotations

import io
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


def _two_output_sce(m: onnx.ModelProto) -> None:
    """PyTorch writes SoftmaxCrossEntropyLoss with the loss output only; ORT 1.19.2's
    gradient builder needs the log-probability output too (it fails with
    `i < node_->OutputDefs().size() was false`), which is why ORTModule exports the
    loss with its own symbolic.  Add the second output the same way."""
    for node in m.graph.node:
        if node.op_type == "SoftmaxCrossEntropyLoss" and len(node.output) == 1:
            node.output.append(node.output[0] + "_log_prob")


def _export(name: str, model: nn.Module, args: tuple, input_names, opset: int = 17) -> None:
    torch.manual_seed(0)
    for p in model.parameters():
        nn.init.normal_(p, std=0.5)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, f, input_names=list(input_names), output_names=["out"],
                          opset_version=opset, dynamo=False, do_constant_folding=True)
    m = onnx.load_from_string(f.getvalue())
    m.ir_version = min(m.ir_version, 8)
    _two_output_sce(m)
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


if __name__ == "__main__":
    main()
