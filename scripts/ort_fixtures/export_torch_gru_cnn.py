"""Export issue #32's PyTorch models to ONNX: a two-layer nn.GRU with a Linear head and a small CNN (nn.Conv2d,
nn.BatchNorm2d, nn.MaxPool2d, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Linear), by the TorchScript exporter and by
the dynamo one.  Like export_torch.py (whose `_export` it uses) it needs torch and onnxscript, not onnxruntime:

    python scripts/ort_fixtures/export_torch_gru_cnn.py

It writes scripts/ort_fixtures/torch_models/torch_{gru,cnn}*.onnx (committed, a few KB each), which generate.py (in
the ORT venv) turns into fixtures.  Written with torch 2.13.0 and onnxscript 0.7.2.
"""

from __future__ import annotations

import torch
from export_torch import _export
from torch import nn


class GRUHead(nn.Module):
    """nn.GRU(4, 6, num_layers=2) (sequence first, zero initial state) and a Linear head on the last step's output:
    x [5, 3, 4] -> logits [3, 4]."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 6, num_layers=2)
        self.head = nn.Linear(6, 4)

    def forward(self, x):
        y, _ = self.gru(x)
        return self.head(y[-1])


class SmallCNN(nn.Module):
    """x [4, 3, 8, 8] -> Conv2d(3, 8, 3, padding=1, no bias)-BatchNorm2d-ReLU-MaxPool2d(2) -> Conv2d(8, 8, 3,
    padding=1)-ReLU -> AdaptiveAvgPool2d(1) -> Flatten -> Linear(8, 5).  No bias before the batch norm: its
    gradient would be zero up to rounding."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = self.pool(torch.relu(self.bn(self.conv1(x))))
        return self.fc(self.flatten(self.gap(torch.relu(self.conv2(h)))))


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 3, 4)
    # eval mode: the weights' Slice/Concat (torch's gate order to ONNX's) constant-folded into initializers
    _export("torch_gru", GRUHead(), (x,), ["X"], std=0.4)
    # training mode, no constant folding: the GRU's W, R, B are Concat/Slice/Unsqueeze of torch's parameters
    _export("torch_gru_unfolded", GRUHead(), (x,), ["X"], std=0.4, training=True)
    _export("torch_gru_dynamo", GRUHead(), (x,), ["X"], opset=18, std=0.4, dynamo=True)
    xc = torch.randn(4, 3, 8, 8)
    for name, dynamo in (("torch_cnn", False), ("torch_cnn_dynamo", True)):
        # MaxPool as PyTorch writes it, Y only: ORT adds the Indices output (`<Y>_mask`) its MaxPoolGrad reads
        _export(name, SmallCNN(), (xc,), ["X"], opset=18 if dynamo else 17, std=0.3, training=True, dynamo=dynamo)


if __name__ == "__main__":
    main()
