"""Regenerate ``sce_torch.npz``: PyTorch's cross-entropy values and gradients that
``tests/test_kernels_loss.py`` compares gradir's ``SoftmaxCrossEntropyLoss`` with (torch is not a test
dependency, so its numbers are committed).

    python tests/data/make_sce_torch.py      # needs torch (CPU build)

Each case ``k`` stores ``k/scores``, ``k/labels``, optionally ``k/weights``, the upstream gradient
``k/dy`` (a scalar for sum/mean), and torch's ``k/loss``, ``k/log_prob`` (log_softmax over axis 1) and
``k/grad`` (d loss / d scores, contracted with dy); ``cases`` is a JSON list of the cases' settings.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch

# name, dtype, scores shape, reduction, ignore_index (None: absent), weights?
CASES = [
    ("mean_2d", "float64", (6, 5), "mean", None, False),
    ("sum_2d", "float64", (6, 5), "sum", None, False),
    ("none_2d", "float64", (6, 5), "none", None, False),
    ("mean_weights", "float64", (7, 4), "mean", None, True),
    ("sum_weights", "float64", (7, 4), "sum", None, True),
    ("none_weights", "float64", (7, 4), "none", None, True),
    ("mean_ignore", "float64", (8, 3), "mean", -100, False),
    ("mean_ignore_weights", "float64", (8, 3), "mean", 1, True),
    ("none_ignore_weights", "float64", (8, 3), "none", -1, True),
    ("mean_multidim", "float64", (3, 4, 2, 3), "mean", None, False),
    ("mean_multidim_ignore_weights", "float64", (2, 5, 3, 2), "mean", 0, True),
    ("none_multidim", "float64", (2, 3, 4), "none", 2, False),
    ("sum_multidim_weights", "float64", (2, 3, 5), "sum", None, True),
    ("mean_f32", "float32", (16, 10), "mean", None, False),
    ("mean_f32_multidim_ignore_weights", "float32", (4, 6, 5), "mean", -100, True),
    ("none_f32_big_scores", "float32", (5, 7), "none", None, False),
]


def make(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    meta = []
    for name, dtype, shape, reduction, ignore, weighted in CASES:
        scores = rng.standard_normal(shape) * (300.0 if "big" in name else 2.0)
        c = shape[1]
        target = (shape[0],) + tuple(shape[2:])
        labels = rng.integers(0, c, target)
        if ignore is not None:  # about a third ignored, never all
            drop = rng.random(target) < 0.35
            drop.flat[0] = False
            labels[drop] = ignore
            if 0 <= ignore < c:
                labels.flat[0] = (ignore + 1) % c
        x = torch.tensor(scores.astype(dtype), requires_grad=True)
        kw = {"reduction": reduction}
        if ignore is not None:
            kw["ignore_index"] = ignore
        w = None
        if weighted:
            w = rng.uniform(0.2, 2.0, c).astype(dtype)
            kw["weight"] = torch.tensor(w)
        loss = torch.nn.functional.cross_entropy(x, torch.tensor(labels), **kw)
        dy = rng.standard_normal(target).astype(dtype) if reduction == "none" else np.asarray(1.5, dtype)
        loss.backward(torch.tensor(dy))
        out[f"{name}/scores"] = scores.astype(dtype)
        out[f"{name}/labels"] = labels.astype(np.int64)
        if w is not None:
            out[f"{name}/weights"] = w
        out[f"{name}/dy"] = dy
        out[f"{name}/loss"] = loss.detach().numpy()
        out[f"{name}/log_prob"] = torch.log_softmax(x.detach(), dim=1).numpy()
        out[f"{name}/grad"] = x.grad.numpy()
        meta.append({"name": name, "reduction": reduction, "ignore_index": ignore, "weights": weighted})
    out["cases"] = np.array(json.dumps(meta))
    return out


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sce_torch.npz")
    np.savez_compressed(path, **make())
    print(f"wrote {path} (torch {torch.__version__})")
