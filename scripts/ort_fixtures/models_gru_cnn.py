"""GRU and convolutional networks behind tests/data/onnx/ (issue #32), written with onnx.helper at opset 17:
GRU classifiers (the last hidden state, ``linear_before_reset`` 0 and 1) and a GRU language model (every step's
output), small CNNs (Conv-Relu-MaxPool, BatchNormalization in training mode, a depthwise-separable block, Pad and
AveragePool with strided and dilated convolutions, a 1-D convolution over a sequence).  models.py appends them to
its case list; the PyTorch exports of nn.GRU and of a small nn.Conv2d CNN are in models.py's TORCH_CASES.

Every GRU lists all six input slots (X, W, R, B, sequence_lens, initial_h), absent ones as "": ORT 1.19.2's GRU
gradient builder copies the node's inputs positionally into GRUGrad's and misaligns them on a shorter list (a GRU
with four slots: "Type 'tensor(float)' of input parameter (all_hidden_states) of operator (GRUGrad) ... is
invalid").  ORT's MaxPool gradient, MaxPoolGrad(dY, Indices), reads the MaxPool's Indices output: ORT adds it
(`<Y>_mask`) when the source has none (small_cnn), and uses the source's when named (the other cases).  Sizes
are small (a few hundred parameters) so every case directory stays well under 100 KB.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from models import INT64, Case, _init, _model, _rng, _vi

mk = helper.make_node


def _i64(v, name):
    return numpy_helper.from_array(np.array(v, np.int64), name)


# --- GRUs ------------------------------------------------------------------------------

GS, GB, GI, GH, GK = 5, 3, 4, 6, 4  # steps, batch, inputs, hidden, classes
LV, LE = 12, 4  # the language model's vocabulary and embedding width


def gru_classifier(seed: int, *, lbr: int, h0: str, own_loss: bool, activations: bool = False,
                   bias: bool = True) -> tuple[onnx.ModelProto, list[str]]:
    """X [S, B, I] -> GRU (hidden 6) -> Y_h [1, B, H] -> Squeeze -> Gemm(transB=1) -> logits [B, K]; h0 'param' (a
    trained initial state), 'input' (a user input) or 'none' (then the GRU's outputs are ["", "Y_h"]: Y not
    asked for).  own_loss: SoftmaxCrossEntropyLoss in the model (else onnxblock's CrossEntropyLoss on the
    logits).  activations: spelled out (lower case, the only spelling ORT 1.19.2's GRUGrad accepts)."""
    rng = _rng(seed)
    inits = [_init(rng, "gru.W", [1, 3 * GH, GI]), _init(rng, "gru.R", [1, 3 * GH, GH])]
    if bias:
        inits.append(_init(rng, "gru.B", [1, 6 * GH], 0.2))
    inputs = [_vi("X", [GS, GB, GI])]
    if h0 == "param":
        inits.append(_init(rng, "gru.h0", [1, GB, GH]))
    elif h0 == "input":
        inputs.append(_vi("gru.h0", [1, GB, GH]))
    inits += [_init(rng, "fc.weight", [GK, GH]), _init(rng, "fc.bias", [GK], 0.1)]
    params = [t.name for t in inits]
    attrs = {"hidden_size": GH, "linear_before_reset": lbr}
    if activations:
        attrs["activations"] = ["sigmoid", "tanh"]
    gru_in = ["X", "gru.W", "gru.R", "gru.B" if bias else "", "", "gru.h0" if h0 != "none" else ""]
    nodes = [mk("GRU", gru_in, ["Y" if h0 != "none" else "", "Y_h"], name="gru0", **attrs),
             mk("Squeeze", ["Y_h", "axes0"], ["h_last"], name="squeeze_dir"),
             mk("Gemm", ["h_last", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1)]
    consts = [_i64([0], "axes0")]
    if own_loss:
        nodes.append(mk("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss", "log_prob"], name="sce",
                        reduction="mean"))
        inputs.append(_vi("labels", [GB], INT64))
        outputs = [_vi("loss", [])]
    else:
        outputs = [_vi("logits", [GB, GK])]
    return _model(nodes, inputs, outputs, inits + consts, 17), params


def gru_lm(seed: int, *, bias: bool) -> tuple[onnx.ModelProto, list[str]]:
    """ids [S, B] -> Gather(emb [V, E]) -> GRU (hidden 6, linear_before_reset=1, no initial_h) -> Y [S, 1, B, H]
    -> Squeeze -> MatMul-Add to V classes -> Reshape [S*B, V]: next-token logits at every step."""
    rng = _rng(seed)
    inits = [_init(rng, "emb", [LV, LE]), _init(rng, "gru.W", [1, 3 * GH, LE]), _init(rng, "gru.R", [1, 3 * GH, GH])]
    if bias:
        inits.append(_init(rng, "gru.B", [1, 6 * GH], 0.2))
    inits += [_init(rng, "out.weight", [GH, LV]), _init(rng, "out.bias", [LV], 0.1)]
    params = [t.name for t in inits]
    nodes = [mk("Gather", ["emb", "ids"], ["e"], name="emb_gather", axis=0),
             mk("GRU", ["e", "gru.W", "gru.R", "gru.B" if bias else "", "", ""], ["Y"], name="gru0",
                hidden_size=GH, linear_before_reset=1),
             mk("Squeeze", ["Y", "axes1"], ["y"], name="squeeze_dir"),
             mk("MatMul", ["y", "out.weight"], ["o0"], name="out_matmul"),
             mk("Add", ["o0", "out.bias"], ["o1"], name="out_add"),
             mk("Reshape", ["o1", "logits_shape"], ["logits"], name="logits_flat")]
    consts = [_i64([1], "axes1"), _i64([-1, LV], "logits_shape")]
    m = _model(nodes, [_vi("ids", [GS, GB], INT64)], [_vi("logits", [GS * GB, LV])], inits + consts, 17)
    return m, params


def _gru_inputs(seed: int, h0: str, own_loss: bool) -> dict[str, np.ndarray]:
    rng = _rng(1000 + seed)
    d = {"X": rng.standard_normal((GS, GB, GI)).astype(np.float32)}
    if h0 == "input":
        d["gru.h0"] = (rng.standard_normal((1, GB, GH)) * 0.5).astype(np.float32)
    d["labels"] = rng.integers(0, GK, size=GB).astype(np.int64)
    return d


def _lm_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = _rng(1000 + seed)
    ids = rng.integers(0, LV, size=(GS, GB)).astype(np.int64)
    labels = np.roll(ids, -1, axis=0)  # the next token
    labels[-1] = rng.integers(0, LV, size=GB)
    return {"ids": ids, "labels": labels.reshape(-1)}


# --- CNNs ------------------------------------------------------------------------------

CB, CK = 4, 5  # batch, classes


def _conv(rng, name, c_out, c_in, kernel, bias=True, scale=0.4):
    inits = [_init(rng, f"{name}.weight", [c_out, c_in, *kernel], scale)]
    if bias:
        inits.append(_init(rng, f"{name}.bias", [c_out], 0.1))
    return inits


def _max_pool(x, out, name, indices=True, **kw):
    """MaxPool with its Indices output named, or (indices False) with Y only, as PyTorch writes it."""
    return mk("MaxPool", [x], [out, f"{name}_indices"] if indices else [out], name=name, **kw)


def _head(rng, x, features):
    """Flatten(axis=1) -> Gemm(transB=1) to CK classes: the logits."""
    inits = [_init(rng, "fc.weight", [CK, features], 0.3), _init(rng, "fc.bias", [CK], 0.1)]
    nodes = [mk("Flatten", [x], ["flat"], name="flatten", axis=1),
             mk("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1)]
    return inits, nodes


def small_cnn(seed: int) -> tuple[onnx.ModelProto, list[str]]:
    """X [4, 3, 8, 8] -> Conv(3->8, 3x3, pad 1)-Relu-MaxPool(2) -> Conv(8->8, 3x3, pad 1)-Relu-MaxPool(2) ->
    Flatten -> Gemm -> logits [4, 5].  The MaxPools have no Indices output (ORT adds them)."""
    rng = _rng(seed)
    inits = _conv(rng, "conv1", 8, 3, [3, 3]) + _conv(rng, "conv2", 8, 8, [3, 3], scale=0.2)
    nodes = [mk("Conv", ["X", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", kernel_shape=[3, 3],
                pads=[1, 1, 1, 1]),
             mk("Relu", ["c1"], ["r1"], name="relu1"),
             _max_pool("r1", "p1", "pool1", False, kernel_shape=[2, 2], strides=[2, 2]),
             mk("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", kernel_shape=[3, 3],
                pads=[1, 1, 1, 1]),
             mk("Relu", ["c2"], ["r2"], name="relu2"),
             _max_pool("r2", "p2", "pool2", False, kernel_shape=[2, 2], strides=[2, 2])]
    head_inits, head = _head(rng, "p2", 8 * 2 * 2)
    inits += head_inits
    m = _model(nodes + head, [_vi("X", [CB, 3, 8, 8])], [_vi("logits", [CB, CK])], inits, 17)
    return m, [t.name for t in inits]


def cnn_bn(seed: int) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """X [4, 3, 8, 8] -> Conv(3->8, no bias)-BatchNormalization(training_mode=1, running statistics frozen)-Relu-
    MaxPool(2) -> Conv(8->8)-Relu -> GlobalAveragePool -> Flatten -> Gemm -> logits [4, 5]."""
    rng = _rng(seed)
    inits = _conv(rng, "conv1", 8, 3, [3, 3], bias=False)
    inits += [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(8)).astype(np.float32), "bn.weight"),
              _init(rng, "bn.bias", [8], 0.1), _init(rng, "bn.running_mean", [8], 0.1),
              numpy_helper.from_array((1 + 0.2 * rng.random(8)).astype(np.float32), "bn.running_var")]
    inits += _conv(rng, "conv2", 8, 8, [3, 3], scale=0.2)
    frozen = ["bn.running_mean", "bn.running_var"]
    nodes = [mk("Conv", ["X", "conv1.weight"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             mk("BatchNormalization", ["c1", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
                ["n1", "bn.running_mean_out", "bn.running_var_out"], name="bn", epsilon=1e-5, momentum=0.9,
                training_mode=1),
             mk("Relu", ["n1"], ["r1"], name="relu1"),
             _max_pool("r1", "p1", "pool1", kernel_shape=[2, 2], strides=[2, 2]),
             mk("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", kernel_shape=[3, 3],
                pads=[1, 1, 1, 1]),
             mk("Relu", ["c2"], ["r2"], name="relu2"),
             mk("GlobalAveragePool", ["r2"], ["g"], name="gap")]
    head_inits, head = _head(rng, "g", 8)
    inits += head_inits
    m = _model(nodes + head, [_vi("X", [CB, 3, 8, 8])], [_vi("logits", [CB, CK])], inits, 17)
    return m, [t.name for t in inits if t.name not in frozen], frozen


def cnn_dwsep(seed: int) -> tuple[onnx.ModelProto, list[str]]:
    """X [4, 4, 8, 8] -> depthwise Conv(4->4, 3x3, group=4, pad 1)-Relu -> pointwise Conv(4->8, 1x1)-Relu ->
    MaxPool(2) -> a second depthwise (group=8, 3x3, no pad) -> Flatten -> Gemm -> logits [4, 5]."""
    rng = _rng(seed)
    inits = (_conv(rng, "dw1", 4, 1, [3, 3]) + _conv(rng, "pw1", 8, 4, [1, 1])
             + _conv(rng, "dw2", 8, 1, [3, 3], bias=False))
    nodes = [mk("Conv", ["X", "dw1.weight", "dw1.bias"], ["d1"], name="dw1", kernel_shape=[3, 3],
                pads=[1, 1, 1, 1], group=4),
             mk("Relu", ["d1"], ["r1"], name="relu1"),
             mk("Conv", ["r1", "pw1.weight", "pw1.bias"], ["c1"], name="pw1", kernel_shape=[1, 1]),
             mk("Relu", ["c1"], ["r2"], name="relu2"),
             _max_pool("r2", "p1", "pool1", kernel_shape=[2, 2], strides=[2, 2]),
             mk("Conv", ["p1", "dw2.weight"], ["d2"], name="dw2", kernel_shape=[3, 3], group=8)]
    head_inits, head = _head(rng, "d2", 8 * 2 * 2)
    inits += head_inits
    m = _model(nodes + head, [_vi("X", [CB, 4, 8, 8])], [_vi("logits", [CB, CK])], inits, 17)
    return m, [t.name for t in inits]


def cnn_pad_avgpool(seed: int, mode: str) -> tuple[onnx.ModelProto, list[str]]:
    """X [2, 3, 9, 9] -> Conv(3->4, 1x1) and Pad(mode, 1 around H and W) -> Conv(4->6, 3x3, strides 2, dilations 2)
    -> Relu -> AveragePool(3x3, strides 2, pads 1, count_include_pad=1) -> Conv(6->4, 1x1) -> Flatten -> Gemm ->
    logits [2, 5].  A constant Pad comes after the first Conv, so that ORT differentiates it; a reflect Pad comes
    first, on X: ORT 1.19.2 has no gradient of it ("Pad gradient currently supports constant mode only"), so the
    fixture's references cannot go through it (gradir's gradient of it is checked by gradcheck with respect to X,
    tests/test_onnx_networks.py)."""
    rng = _rng(seed)
    inits = _conv(rng, "conv0", 4, 3, [1, 1]) + _conv(rng, "conv1", 6, 4, [3, 3]) + _conv(rng, "conv2", 4, 6, [1, 1])
    consts = [_i64([0, 0, 1, 1, 0, 0, 1, 1], "pads")]
    first = mode != "constant"  # the Pad on X
    pad_in = ["X" if first else "c0", "pads"]
    if mode == "constant":
        consts.append(numpy_helper.from_array(np.array(0.5, np.float32), "pad_value"))
        pad_in.append("pad_value")
    pad = mk("Pad", pad_in, ["xp0" if first else "xp"], name="pad", mode=mode)
    conv0 = mk("Conv", ["xp0" if first else "X", "conv0.weight", "conv0.bias"], ["xp" if first else "c0"],
               name="conv0", kernel_shape=[1, 1])
    nodes = [pad, conv0] if first else [conv0, pad]  # either way [2, 4, 11, 11]
    nodes += [mk("Conv", ["xp", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", kernel_shape=[3, 3],
                 strides=[2, 2], dilations=[2, 2]),  # [2, 6, 4, 4]
              mk("Relu", ["c1"], ["r1"], name="relu1"),
              mk("AveragePool", ["r1"], ["a1"], name="avgpool", kernel_shape=[3, 3], strides=[2, 2],
                 pads=[1, 1, 1, 1], count_include_pad=1),  # [2, 6, 2, 2]
              mk("Conv", ["a1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", kernel_shape=[1, 1])]
    head_inits, head = _head(rng, "c2", 4 * 2 * 2)
    inits += head_inits
    m = _model(nodes + head, [_vi("X", [2, 3, 9, 9])], [_vi("logits", [2, CK])], inits + consts, 17)
    return m, [t.name for t in inits]


def cnn1d(seed: int) -> tuple[onnx.ModelProto, list[str]]:
    """X [4, 3, 16] (channels, then a sequence) -> Conv1d(3->6, k 3, pad 1)-Relu-MaxPool1d(2) -> Conv1d(6->6, k 3,
    strides 2, pads [1, 0])-Relu -> Flatten -> Gemm -> logits [4, 5]."""
    rng = _rng(seed)
    inits = _conv(rng, "conv1", 6, 3, [3]) + _conv(rng, "conv2", 6, 6, [3], scale=0.3)
    nodes = [mk("Conv", ["X", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", kernel_shape=[3], pads=[1, 1]),
             mk("Relu", ["c1"], ["r1"], name="relu1"),
             _max_pool("r1", "p1", "pool1", kernel_shape=[2], strides=[2]),  # [4, 6, 8]
             mk("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", kernel_shape=[3], strides=[2],
                pads=[1, 0]),  # [4, 6, 4]
             mk("Relu", ["c2"], ["r2"], name="relu2")]
    head_inits, head = _head(rng, "r2", 6 * 4)
    inits += head_inits
    m = _model(nodes + head, [_vi("X", [CB, 3, 16])], [_vi("logits", [CB, CK])], inits, 17)
    return m, [t.name for t in inits]


def cnn_autopad_ceil(seed: int) -> tuple[onnx.ModelProto, list[str]]:
    """X [2, 3, 9, 9] -> Conv(3->6, 3x3, strides 2, pads [0, 0, 2, 2])-Relu -> [2, 6, 5, 5] -> MaxPool(2x2,
    strides 2, ceil_mode=1) -> [2, 6, 3, 3] -> AveragePool(2x2, pads [0, 0, 1, 1], count_include_pad=0) ->
    [2, 6, 3, 3] -> Conv(6->4, 3x3, auto_pad=VALID) -> Flatten -> Gemm -> logits [2, 5].

    Not auto_pad=SAME_UPPER on the first Conv: ORT 1.19.2's ConvGrad gets its weight gradient wrong there (off by
    more than 100% against float64 finite differences, and different from run to run: it reads memory it did
    not write), so no reference of ORT's could be trusted."""
    rng = _rng(seed)
    inits = _conv(rng, "conv1", 6, 3, [3, 3]) + _conv(rng, "conv2", 4, 6, [3, 3], scale=0.3)
    nodes = [mk("Conv", ["X", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", kernel_shape=[3, 3],
                strides=[2, 2], pads=[0, 0, 2, 2]),
             mk("Relu", ["c1"], ["r1"], name="relu1"),
             _max_pool("r1", "p1", "pool1", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             mk("AveragePool", ["p1"], ["a1"], name="avgpool", kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
             mk("Conv", ["a1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", kernel_shape=[3, 3],
                auto_pad="VALID")]
    head_inits, head = _head(rng, "c2", 4)
    inits += head_inits
    m = _model(nodes + head, [_vi("X", [2, 3, 9, 9])], [_vi("logits", [2, CK])], inits, 17)
    return m, [t.name for t in inits]


def cnn3d(seed: int) -> tuple[onnx.ModelProto, list[str]]:
    """X [2, 2, 4, 4, 4] -> Conv3d(2->4, 3x3x3, pad 1)-Relu-MaxPool3d(2) -> [2, 4, 2, 2, 2] -> Flatten -> Gemm ->
    logits [2, 5]."""
    rng = _rng(seed)
    inits = _conv(rng, "conv1", 4, 2, [3, 3, 3], scale=0.3)
    nodes = [mk("Conv", ["X", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", kernel_shape=[3, 3, 3],
                pads=[1, 1, 1, 1, 1, 1]),
             mk("Relu", ["c1"], ["r1"], name="relu1"),
             _max_pool("r1", "p1", "pool1", kernel_shape=[2, 2, 2], strides=[2, 2, 2])]
    head_inits, head = _head(rng, "p1", 4 * 8)
    inits += head_inits
    m = _model(nodes + head, [_vi("X", [2, 2, 4, 4, 4])], [_vi("logits", [2, CK])], inits, 17)
    return m, [t.name for t in inits]


def cnn_maxpool_storage_order(seed: int) -> tuple[onnx.ModelProto, list[str]]:
    """X [2, 2, 9, 10] -> Conv(2->4, 3x3, dilations [1, 2], pads [0, 2, 1, 0])-Sigmoid -> MaxPool(2x2, dilations
    [2, 1], pads [0, 0, 1, 1], storage_order=1) -> Conv(4->4, 2x2, strides [1, 2])-Tanh -> AveragePool(2x2, strides
    2, ceil_mode=1) -> [2, 4, 3, 2] -> Flatten -> Gemm(no bias) -> logits [2, 3].

    ORT 1.19.2's MaxPoolGrad reads the Indices row-major whatever storage_order says: its gradients of the first
    Conv are not the derivative (tests/test_onnx_ort.py checks gradir's against finite differences there)."""
    rng = _rng(seed)
    inits = _conv(rng, "conv1", 4, 2, [3, 3]) + _conv(rng, "conv2", 4, 4, [2, 2], scale=0.3)
    nodes = [mk("Conv", ["X", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", kernel_shape=[3, 3],
                dilations=[1, 2], pads=[0, 2, 1, 0]),
             mk("Sigmoid", ["c1"], ["s1"], name="sigmoid1"),
             _max_pool("s1", "p1", "pool1", kernel_shape=[2, 2], dilations=[2, 1], pads=[0, 0, 1, 1], storage_order=1),
             mk("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", kernel_shape=[2, 2],
                strides=[1, 2]),
             mk("Tanh", ["c2"], ["t2"], name="tanh2"),
             mk("AveragePool", ["t2"], ["a2"], name="avgpool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)]
    inits.append(_init(rng, "fc.weight", [4 * 3 * 2, 3], 0.3))
    nodes += [mk("Flatten", ["a2"], ["flat"], name="flatten", axis=1),
              mk("Gemm", ["flat", "fc.weight"], ["logits"], name="fc")]
    m = _model(nodes, [_vi("X", [2, 2, 9, 10])], [_vi("logits", [2, 3])], inits, 17)
    return m, [t.name for t in inits]


def cnn_resnet_block(seed: int) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """X [2, 3, 8, 8] -> stem Conv(3->4)-Relu -> a residual block: Conv(no bias)-BatchNormalization(training)-Relu-
    Conv(no bias), Add of the stem, Relu -> 1x1 Conv(4->8, strides 2, no bias) -> grouped Conv(group=2, pad 1)-
    LeakyRelu -> MaxPool(3x3, strides 2, pads 1: overlapping windows, Y only) -> Concat of it with itself (channel
    axis) -> Reshape [0, -1] -> MatMul-Add -> logits [2, 5]."""
    rng = _rng(seed)
    inits = _conv(rng, "stem", 4, 3, [3, 3]) + _conv(rng, "block.conv1", 4, 4, [3, 3], bias=False)
    inits += [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(4)).astype(np.float32), "block.bn.weight"),
              _init(rng, "block.bn.bias", [4], 0.1), _init(rng, "block.bn.running_mean", [4], 0.1),
              numpy_helper.from_array((1 + 0.2 * rng.random(4)).astype(np.float32), "block.bn.running_var")]
    inits += (_conv(rng, "block.conv2", 4, 4, [3, 3], bias=False, scale=0.3)
              + _conv(rng, "down", 8, 4, [1, 1], bias=False) + _conv(rng, "group", 8, 4, [3, 3], scale=0.3))
    inits += [_init(rng, "fc.weight", [64, CK], 0.3), _init(rng, "fc.bias", [CK], 0.1)]
    frozen = ["block.bn.running_mean", "block.bn.running_var"]
    pad1 = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [mk("Conv", ["X", "stem.weight", "stem.bias"], ["s0"], name="stem", **pad1),
             mk("Relu", ["s0"], ["s"], name="stem_relu"),
             mk("Conv", ["s", "block.conv1.weight"], ["b0"], name="block_conv1", **pad1),
             mk("BatchNormalization", ["b0", "block.bn.weight", "block.bn.bias", "block.bn.running_mean",
                                       "block.bn.running_var"], ["b1", "block.bn.running_mean_out",
                                                                 "block.bn.running_var_out"],
                name="block_bn", training_mode=1),
             mk("Relu", ["b1"], ["b2"], name="block_relu1"),
             mk("Conv", ["b2", "block.conv2.weight"], ["b3"], name="block_conv2", **pad1),
             mk("Add", ["b3", "s"], ["b4"], name="residual"),
             mk("Relu", ["b4"], ["b"], name="block_relu2"),
             mk("Conv", ["b", "down.weight"], ["d"], name="down", kernel_shape=[1, 1], strides=[2, 2]),  # [2, 8, 4, 4]
             mk("Conv", ["d", "group.weight", "group.bias"], ["g0"], name="group_conv", group=2, **pad1),
             mk("LeakyRelu", ["g0"], ["g"], name="leaky", alpha=0.1),
             mk("MaxPool", ["g"], ["m"], name="pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             mk("Concat", ["m", "m"], ["cc"], name="concat", axis=1),  # [2, 16, 2, 2]
             mk("Reshape", ["cc", "flat_shape"], ["flat"], name="flatten"),
             mk("MatMul", ["flat", "fc.weight"], ["l0"], name="fc_matmul"),
             mk("Add", ["l0", "fc.bias"], ["logits"], name="fc_add")]
    m = _model(nodes, [_vi("X", [2, 3, 8, 8])], [_vi("logits", [2, CK])], inits + [_i64([0, -1], "flat_shape")], 17)
    return m, [t.name for t in inits if t.name not in frozen], frozen


def _cnn_inputs(seed: int, shape) -> dict[str, np.ndarray]:
    rng = _rng(1000 + seed)
    return {"X": rng.standard_normal(shape).astype(np.float32),
            "labels": rng.integers(0, CK, size=shape[0]).astype(np.int64)}


CE = ("ce", "mean", None)


def cases() -> list[Case]:
    out: list[Case] = []
    for name, what, kw, seed in [
            ("gru_classifier_minimal", "GRU classifier: X [5, 3, 4] -> GRU(hidden 6, no bias, no initial_h, "
             "outputs [\"\", Y_h]) -> Squeeze -> Gemm(transB=1) to 4 classes, CrossEntropyLoss (mean) by onnxblock",
             dict(lbr=0, h0="none", own_loss=False, bias=False), 402),
            ("gru_classifier", "GRU classifier: X [5, 3, 4] -> GRU(hidden 6, bias, trained initial_h, "
             "linear_before_reset=0, all six input slots) -> Y_h -> Squeeze -> Gemm(transB=1) to 4 classes, "
             "SoftmaxCrossEntropyLoss (mean) in the model", dict(lbr=0, h0="param", own_loss=True), 400),
            ("gru_classifier_lbr1", "GRU classifier as gru_classifier with linear_before_reset=1 (as PyTorch "
             "writes it), activations spelled [\"sigmoid\", \"tanh\"], initial_h a user input, CrossEntropyLoss "
             "(mean) by onnxblock", dict(lbr=1, h0="input", own_loss=False, activations=True), 401)]:
        m, params = gru_classifier(seed, **kw)
        loss = ("own",) if kw["own_loss"] else CE
        out.append(Case(name, what, 17, m, loss, _gru_inputs(seed, kw["h0"], kw["own_loss"]), params))
    for name, bias, seed in (("gru_lm", True, 410), ("gru_lm_nobias", False, 411)):
        m, params = gru_lm(seed, bias=bias)
        out.append(Case(name, f"GRU language model: Gather of an embedding [{LV}, {LE}] by ids [5, 3], GRU(hidden 6, "
                        f"linear_before_reset=1, {'bias' if bias else 'no bias'}, no initial_h), every step's output "
                        f"-> MatMul-Add to {LV} classes, Reshape [-1, {LV}], CrossEntropyLoss (mean) by onnxblock",
                        17, m, CE, _lm_inputs(seed), params))
    m, params = small_cnn(420)
    out.append(Case("small_cnn", "CNN: X [4, 3, 8, 8] -> Conv(3->8, 3x3, pad 1)-Relu-MaxPool(2) -> Conv(8->8)-Relu-"
                    "MaxPool(2) (MaxPools without Indices output) -> Flatten -> Gemm to 5 classes, CrossEntropyLoss "
                    "(mean) by onnxblock", 17, m, CE, _cnn_inputs(420, (CB, 3, 8, 8)), params))
    m, params, frozen = cnn_bn(421)
    out.append(Case("cnn_bn", "CNN: Conv(no bias)-BatchNormalization(training_mode=1, running stats frozen)-Relu-"
                    "MaxPool(2) -> Conv-Relu -> GlobalAveragePool -> Flatten -> Gemm, CrossEntropyLoss (mean) by "
                    "onnxblock", 17, m, CE, _cnn_inputs(421, (CB, 3, 8, 8)), params, frozen))
    m, params = cnn_dwsep(422)
    out.append(Case("cnn_dwsep", "depthwise-separable CNN: depthwise Conv(group=4, 3x3, pad 1)-Relu -> pointwise "
                    "Conv(1x1, 4->8)-Relu -> MaxPool(2) -> depthwise Conv(group=8, no bias) -> Flatten -> Gemm, "
                    "CrossEntropyLoss (mean) by onnxblock", 17, m, CE, _cnn_inputs(422, (CB, 4, 8, 8)), params))
    for mode, seed in (("reflect", 423), ("constant", 424)):
        m, params = cnn_pad_avgpool(seed, mode)
        pad = f"Pad({mode}{', value 0.5' if mode == 'constant' else ''}, 1 around H and W)"
        first = f"{pad} -> Conv(1x1)" if mode != "constant" else f"Conv(1x1) -> {pad}"
        out.append(Case(f"cnn_pad_{mode}_avgpool", f"CNN: X [2, 3, 9, 9] -> {first} -> Conv(3x3, strides 2, "
                        "dilations 2)-Relu -> AveragePool(3x3, strides 2, pads 1, count_include_pad=1) -> Conv(1x1) "
                        "-> Flatten -> Gemm, CrossEntropyLoss (mean) by onnxblock", 17, m, CE,
                        _cnn_inputs(seed, (2, 3, 9, 9)), params))
    m, params = cnn_autopad_ceil(426)
    out.append(Case("cnn_autopad_ceil", "CNN: Conv(3x3, strides 2, pads [0, 0, 2, 2])-Relu -> MaxPool(2x2, "
                    "ceil_mode=1) -> AveragePool(2x2, pads [0, 0, 1, 1], count_include_pad=0) -> Conv(3x3, "
                    "auto_pad=VALID) -> Flatten -> Gemm, CrossEntropyLoss (mean) by onnxblock", 17, m, CE,
                    _cnn_inputs(426, (2, 3, 9, 9)), params))
    m, params = cnn3d(427)
    out.append(Case("cnn3d", "3-D CNN: X [2, 2, 4, 4, 4] -> Conv(3x3x3, pad 1)-Relu-MaxPool(2x2x2) -> Flatten -> "
                    "Gemm, CrossEntropyLoss (mean) by onnxblock", 17, m, CE, _cnn_inputs(427, (2, 2, 4, 4, 4)),
                    params))
    m, params = cnn_maxpool_storage_order(428)
    inputs = _cnn_inputs(428, (2, 2, 9, 10))
    inputs["labels"] %= 3
    out.append(Case("cnn_maxpool_storage_order", "CNN: Conv(3x3, dilations [1, 2], asymmetric pads)-Sigmoid -> "
                    "MaxPool(2x2, dilations [2, 1], pads, storage_order=1) -> Conv(2x2, strides [1, 2])-Tanh -> "
                    "AveragePool(2x2, strides 2, ceil_mode=1) -> Flatten -> Gemm (no bias), CrossEntropyLoss (mean) by "
                    "onnxblock; ORT's gradients of the first Conv are not the derivative (its MaxPoolGrad ignores "
                    "storage_order)", 17, m, CE, inputs, params))
    m, params, frozen = cnn_resnet_block(429)
    out.append(Case("cnn_resnet_block", "CNN with a residual block: stem Conv-Relu, Conv-BatchNormalization(training)-"
                    "Relu-Conv + the stem, Relu, 1x1 Conv(strides 2), grouped Conv(group=2)-LeakyRelu, overlapping "
                    "padded MaxPool (Y only), Concat, Reshape [0, -1], MatMul-Add, CrossEntropyLoss (mean) by "
                    "onnxblock", 17, m, CE, _cnn_inputs(429, (2, 3, 8, 8)), params, frozen))
    m, params = cnn1d(425)
    out.append(Case("cnn1d", "1-D CNN over a sequence: X [4, 3, 16] -> Conv(k 3, pad 1)-Relu-MaxPool(2) -> "
                    "Conv(k 3, strides 2, pads [1, 0])-Relu -> Flatten -> Gemm, CrossEntropyLoss (mean) by onnxblock",
                    17, m, CE, _cnn_inputs(425, (CB, 3, 16)), params))
    return out
