"""Export issue #32's PyTorch models to ONNX: a two-layer nn.GRU with a Linear head, a batch-first nn.GRU with
its initial state an input, a 1-D CNN (nn.ReflectionPad1d, nn.Conv1d, nn.AvgPool1d, nn.AdaptiveAvgPool1d) and a
small 2-D CNN (nn.Conv2d, nn.BatchNorm2d, nn.MaxPool2d, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Linear), by the
TorchScript exporter and by the dynamo one.  Like export_torch.py (whose `_export` it uses) it needs torch and
onnxscript, not onnxruntime:

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


class GRUBatchFirst(nn.Module):
    """nn.GRU(4, 5, batch_first=True) with the initial state a model input, its whole output (mean over time) and
    its last state both reaching a Linear head: x [3, 6, 4], h0 [1, 3, 5] -> logits [3, 3]."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 5, batch_first=True)
        self.head = nn.Linear(5, 3)

    def forward(self, x, h0):
        y, hn = self.gru(x, h0)
        return self.head(y.mean(1) + hn[0])


class CNN1d(nn.Module):
    """x [4, 3, 20] -> ReflectionPad1d(2) -> Conv1d(3, 6, 5, stride 2)-ReLU -> AvgPool1d(3, stride 2, padding 1)
    -> Conv1d(6, 4, 3, groups 2, dilation 2)-ReLU -> AdaptiveAvgPool1d(1) -> flatten -> Linear(4, 5)."""

    def __init__(self):
        super().__init__()
        self.pad = nn.ReflectionPad1d(2)
        self.conv1 = nn.Conv1d(3, 6, 5, stride=2)
        self.pool = nn.AvgPool1d(3, stride=2, padding=1)
        self.conv2 = nn.Conv1d(6, 4, 3, groups=2, dilation=2)
        self.gap = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        h = self.pool(torch.relu(self.conv1(self.pad(x))))
        return self.fc(self.gap(torch.relu(self.conv2(h))).flatten(1))


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
    _export("torch_gru_batch_first", GRUBatchFirst(), (torch.randn(3, 6, 4), torch.randn(1, 3, 5)), ["X", "h0"],
            std=0.4)
    x1 = torch.randn(4, 3, 20)
    _export("torch_cnn1d", CNN1d(), (x1,), ["X"], std=0.3)
    _export("torch_cnn1d_dynamo", CNN1d(), (x1,), ["X"], opset=18, std=0.3, dynamo=True)


if __name__ == "__main__":
    main()
