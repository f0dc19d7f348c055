"""The CNN cases of ``bench_graphs.py`` (issue [rnn-cnn], "CNN speed").

``cnn``: a small image classifier's training step: two 3x3 convolutions of ``F`` channels (pads 1, a bias),
each followed by ``Relu`` and a 2x2 ``MaxPool`` of stride 2, the first from 3 input channels; the pooled
maps flattened (``Reshape``), a linear head (``MatMul`` + ``Add``) and the mean cross-entropy
(``SoftmaxCrossEntropyLoss``) of integer labels.  The images are data (not differentiated), so the first
convolution's input gradient is not wanted.

``dwsep``: a depthwise-separable block inside a network: a 3x3 depthwise convolution (``group`` = channels)
and a 1x1 pointwise one, each with a bias and ``Relu``, a 2x2 ``MaxPool``, a global average
(``ReduceMean`` over the spatial axes), a linear head and the mean cross-entropy.  The block's input is
differentiated too (a layer before it would need its gradient).

PyTorch computes the same function with ``F.conv2d``/``F.max_pool2d`` (oneDNN on CPU), JAX with
``lax.conv_general_dilated``/``lax.reduce_window``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from graph_cases import F32, Case, _normal

# batch, input channels, image side, channels of both convolutions, classes
CNN_SIZES = {"full": (64, 3, 32, 64, 10), "quick": (16, 3, 16, 32, 10), "tiny": (2, 3, 8, 4, 3)}
# batch, channels of the block's input, image side, pointwise output channels, classes
DWSEP_SIZES = {"full": (64, 64, 32, 128, 10), "quick": (16, 32, 16, 64, 10), "tiny": (2, 4, 6, 5, 3)}


def _text(inputs: dict[str, np.ndarray], body: list[str], output: str) -> tuple[str, dict[str, str]]:
    """The graph's text with its values numbered ``t0, t1, ...`` (the text's value names), written with
    readable labels here, and the number of each label."""
    types = {np.dtype(np.int64): "Int64", np.dtype(F32): "Float32"}
    lines = [f"input {k} : {types[v.dtype]} [{', '.join(map(str, v.shape))}]" for k, v in inputs.items()]
    labels = list(inputs) + [name.strip() for line in body for name in line.split("=")[0].split(",")]
    num = {k: f"t{i}" for i, k in enumerate(labels)}
    text = "\n".join(lines + body + [f"output {output}"]) + "\n"
    return re.sub(r"\b[a-z]\w*\b", lambda m: num.get(m.group(0), m.group(0)), text), num


def _case(key: str, title: str, inputs: dict, body: list[str], wrt: list[str], torch_side: Callable,
          jax_side: Callable, note: str) -> Case:
    text, num = _text(inputs, body, "loss")
    return Case(key, title, text, [num[k] for k in wrt], wrt, {num[k]: v for k, v in inputs.items()},
                [np.array(1.0, F32)], torch_side, jax_side, [note])


def _torch_pieces(torch: Any, x: dict, names: list[str]) -> tuple[list, Any]:
    return [torch.from_numpy(x[k]).clone().requires_grad_(True) for k in names], torch.nn.functional


def _jax_pool(jax: Any, y: Any) -> Any:
    return jax.lax.reduce_window(y, -np.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _jax_conv(jax: Any, x: Any, w: Any, b: Any, pad: int, groups: int = 1) -> Any:
    y = jax.lax.conv_general_dilated(x, w, (1, 1), [(pad, pad), (pad, pad)], feature_group_count=groups,
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return y + b[None, :, None, None]


def _jax_loss(jax: Any, logits: Any, labels: Any) -> Any:
    lp = jax.nn.log_softmax(logits, axis=-1)
    return -jax.numpy.take_along_axis(lp, labels[:, None], axis=1).mean()


def cnn(scale: str, seed: int = 0) -> Case:
    N, C, S, F, K = CNN_SIZES[scale]
    rng = np.random.default_rng(seed)
    flat = F * (S // 4) ** 2
    inputs = {"x": _normal(rng, (N, C, S, S)), "labels": rng.integers(0, K, N).astype(np.int64),
              "w1": _normal(rng, (F, C, 3, 3), np.sqrt(2 / (9 * C))), "b1": _normal(rng, (F,), 0.1),
              "w2": _normal(rng, (F, F, 3, 3), np.sqrt(2 / (9 * F))), "b2": _normal(rng, (F,), 0.1),
              "wl": _normal(rng, (flat, K), 1 / np.sqrt(flat)), "bl": _normal(rng, (K,), 0.1)}
    body = ["c1 = Conv(x, w1, b1, pads=[1, 1, 1, 1])", "r1 = Relu(c1)",
            "p1, i1 = MaxPool(r1, kernel_shape=[2, 2], strides=[2, 2])",
            "c2 = Conv(p1, w2, b2, pads=[1, 1, 1, 1])", "r2 = Relu(c2)",
            "p2, i2 = MaxPool(r2, kernel_shape=[2, 2], strides=[2, 2])",
            f"h = Reshape(p2, shape=[{N}, {flat}])", "z = MatMul(h, wl)", "logits = Add(z, bl)",
            'loss, lp = SoftmaxCrossEntropyLoss(logits, labels, reduction="mean")']
    params = ["w1", "b1", "w2", "b2", "wl", "bl"]

    def torch_side(torch: Any, x: dict) -> tuple:
        args, Fn = _torch_pieces(torch, inputs, params)
        xin, target = torch.from_numpy(inputs["x"]), torch.from_numpy(inputs["labels"])

        def fn(w1: Any, b1: Any, w2: Any, b2: Any, wl: Any, bl: Any) -> tuple:
            h = Fn.max_pool2d(torch.relu(Fn.conv2d(xin, w1, b1, padding=1)), 2)
            h = Fn.max_pool2d(torch.relu(Fn.conv2d(h, w2, b2, padding=1)), 2)
            return (Fn.cross_entropy(h.reshape(N, flat) @ wl + bl, target),)
        return fn, args, args, list

    def jax_side(jax: Any) -> Callable:
        relu = jax.nn.relu

        def f(w1: Any, b1: Any, w2: Any, b2: Any, wl: Any, bl: Any, x: Any, labels: Any) -> tuple:
            h = _jax_pool(jax, relu(_jax_conv(jax, x, w1, b1, 1)))
            h = _jax_pool(jax, relu(_jax_conv(jax, h, w2, b2, 1)))
            return (_jax_loss(jax, h.reshape(N, flat) @ wl + bl, labels),)
        return f

    return _case("cnn", f"CNN: batch {N}, {C}x{S}x{S} images, Conv 3x3 {C}->{F} + Relu + MaxPool 2, Conv 3x3 "
                       f"{F}->{F} + Relu + MaxPool 2, linear {flat}->{K}, mean cross-entropy",
                 inputs, body, params, torch_side, jax_side,
                 "PyTorch: F.conv2d, F.max_pool2d, F.cross_entropy; JAX: lax.conv_general_dilated, "
                 "lax.reduce_window; the images are not differentiated")


def dwsep(scale: str, seed: int = 0) -> Case:
    N, C, S, P, K = DWSEP_SIZES[scale]
    rng = np.random.default_rng(seed)
    inputs = {"x": _normal(rng, (N, C, S, S)), "labels": rng.integers(0, K, N).astype(np.int64),
              "wd": _normal(rng, (C, 1, 3, 3), np.sqrt(2 / 9)), "bd": _normal(rng, (C,), 0.1),
              "wp": _normal(rng, (P, C, 1, 1), np.sqrt(2 / C)), "bp": _normal(rng, (P,), 0.1),
              "wl": _normal(rng, (P, K), 1 / np.sqrt(P)), "bl": _normal(rng, (K,), 0.1)}
    body = [f"d = Conv(x, wd, bd, pads=[1, 1, 1, 1], group={C})", "rd = Relu(d)",
            "q = Conv(rd, wp, bp)", "rq = Relu(q)",
            "p, i = MaxPool(rq, kernel_shape=[2, 2], strides=[2, 2])",
            "h = ReduceMean(p, axes=[2, 3], keepdims=false)", "z = MatMul(h, wl)", "logits = Add(z, bl)",
            'loss, lp = SoftmaxCrossEntropyLoss(logits, labels, reduction="mean")']
    wrt = ["x", "wd", "bd", "wp", "bp", "wl", "bl"]

    def torch_side(torch: Any, x: dict) -> tuple:
        args, Fn = _torch_pieces(torch, inputs, wrt)
        target = torch.from_numpy(inputs["labels"])

        def fn(xin: Any, wd: Any, bd: Any, wp: Any, bp: Any, wl: Any, bl: Any) -> tuple:
            h = torch.relu(Fn.conv2d(xin, wd, bd, padding=1, groups=C))
            h = Fn.max_pool2d(torch.relu(Fn.conv2d(h, wp, bp)), 2)
            return (Fn.cross_entropy(h.mean(dim=(2, 3)) @ wl + bl, target),)
        return fn, args, args, list

    def jax_side(jax: Any) -> Callable:
        relu = jax.nn.relu

        def f(x: Any, wd: Any, bd: Any, wp: Any, bp: Any, wl: Any, bl: Any, labels: Any) -> tuple:
            h = relu(_jax_conv(jax, x, wd, bd, 1, C))
            h = _jax_pool(jax, relu(_jax_conv(jax, h, wp, bp, 0)))
            return (_jax_loss(jax, h.mean(axis=(2, 3)) @ wl + bl, labels),)
        return f

    return _case("dwsep", f"depthwise-separable block: batch {N}, {C}x{S}x{S} input, depthwise Conv 3x3 "
                         f"(group={C}) + Relu, pointwise Conv 1x1 {C}->{P} + Relu, MaxPool 2, global average, "
                         f"linear {P}->{K}, mean cross-entropy",
                 inputs, body, wrt, torch_side, jax_side,
                 "PyTorch: F.conv2d(groups=C), F.max_pool2d, F.cross_entropy; JAX: lax.conv_general_dilated"
                 "(feature_group_count=C); the block's input x is differentiated")
