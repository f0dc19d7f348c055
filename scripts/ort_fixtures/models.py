"""The small forward models behind tests/data/onnx/, written with onnx.helper.

Each case is a `Case`: a forward model (its parameters are initializers), the loss
ORT's onnxblock puts on top of it (or None when the model computes its own loss
and its first output is that loss), and fixed random user inputs.  generate.py
asks ONNX Runtime's training build to differentiate every case.

Only numpy and onnx are needed here (no torch, no onnxruntime).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
IR_VERSION = 8  # ORT 1.19.2 reads IR <= 10; 8 is enough for every opset used here


@dataclass
class Case:
    name: str
    what: str  # one line for the README
    opset: int
    model: onnx.ModelProto
    loss: tuple  # ("mse", reduction) | ("ce", reduction, ignore_index) | ("own",)
    inputs: dict[str, np.ndarray]  # user inputs, loss target/labels included
    params: list[str] = field(default_factory=list)  # trainable (requires_grad)
    frozen: list[str] = field(default_factory=list)  # parameters without gradient


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _init(rng, name, shape, scale=0.5):
    arr = (rng.standard_normal(shape) * scale).astype(np.float32)
    return numpy_helper.from_array(arr, name)


def _model(nodes, inputs, outputs, inits, opset, ms=False, name="g"):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    imports = [helper.make_opsetid("", opset)]
    if ms:
        imports.append(helper.make_opsetid("com.microsoft", 1))
    m = helper.make_model(graph, opset_imports=imports, producer_name="gradir-ort-fixtures")
    m.ir_version = IR_VERSION
    onnx.checker.check_model(m, full_check=True)
    return m


def _vi(name, shape, dtype=FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


# --- MLPs: X[4,6] -> linear -> activation -> linear -> out[4,3] -------------------

N, D_IN, D_H, D_OUT = 4, 6, 8, 3


def _activation_nodes(act: str) -> tuple[list, bool]:
    """Nodes that take 'h' to 'a'; returns (nodes, uses com.microsoft)."""
    mk = helper.make_node
    if act in ("Relu", "Sigmoid", "Tanh"):
        return [mk(act, ["h"], ["a"], name=f"{act.lower()}0")], False
    if act == "LeakyRelu":
        return [mk("LeakyRelu", ["h"], ["a"], name="leaky0", alpha=0.1)], False
    if act == "GeluMS":
        return [mk("Gelu", ["h"], ["a"], name="gelu0", domain="com.microsoft")], True
    if act == "FastGelu":
        return [mk("FastGelu", ["h"], ["a"], name="fastgelu0", domain="com.microsoft")], True
    if act == "QuickGelu":
        return [mk("QuickGelu", ["h"], ["a"], name="quickgelu0", domain="com.microsoft", alpha=1.702)], True
    if act == "BiasGelu":
        return [mk("BiasGelu", ["h0", "B1"], ["a"], name="biasgelu0", domain="com.microsoft")], True
    if act == "FastGeluBias":
        return [mk("FastGelu", ["h0", "B1"], ["a"], name="fastgelu0", domain="com.microsoft")], True
    if act == "GeluOnnx":
        return [mk("Gelu", ["h"], ["a"], name="gelu0")], False
    if act == "GeluOnnxTanh":
        return [mk("Gelu", ["h"], ["a"], name="gelu0", approximate="tanh")], False
    if act == "GeluErf":
        # x * 0.5 * (1 + erf(x / sqrt(2))), the pattern PyTorch's exporter writes
        return [
            mk("Div", ["h", "sqrt2"], ["g_div"], name="gelu_div"),
            mk("Erf", ["g_div"], ["g_erf"], name="gelu_erf"),
            mk("Add", ["g_erf", "one"], ["g_add"], name="gelu_add"),
            mk("Mul", ["h", "g_add"], ["g_mul"], name="gelu_mul"),
            mk("Mul", ["g_mul", "half"], ["a"], name="gelu_mul2"),
        ], False
    raise ValueError(act)


ACT_WHAT = {
    "GeluMS": "com.microsoft Gelu", "GeluErf": "an erf-written GELU (Div sqrt2, Erf, Add 1, Mul, Mul 0.5)",
    "FastGelu": "com.microsoft FastGelu (no bias)", "QuickGelu": "com.microsoft QuickGelu(alpha=1.702)",
    "BiasGelu": "com.microsoft BiasGelu(h, B1) (no Add)", "FastGeluBias": "com.microsoft FastGelu(h, B1) (no Add)",
    "GeluOnnx": "ai.onnx Gelu (opset 20)", "GeluOnnxTanh": "ai.onnx Gelu(approximate=tanh) (opset 20)",
    "LeakyRelu": "LeakyRelu(alpha=0.1)",
}


def mlp(act: str, opset: int, seed: int, *, gemm: bool = False, loss=("mse", "mean"),
        d_out: int = D_OUT) -> tuple[onnx.ModelProto, list[str]]:
    rng = _rng(seed)
    mk = helper.make_node
    inits = [_init(rng, "W1", [D_IN, D_H]), _init(rng, "B1", [D_H], 0.1),
             _init(rng, "W2", [d_out, D_H] if gemm else [D_H, d_out]), _init(rng, "B2", [d_out], 0.1)]
    nodes = [mk("MatMul", ["X", "W1"], ["h0"], name="fc1_matmul")]
    if act not in ("BiasGelu", "FastGeluBias"):  # these take the bias themselves
        nodes.append(mk("Add", ["h0", "B1"], ["h"], name="fc1_add"))
    act_nodes, ms = _activation_nodes(act)
    nodes += act_nodes
    if act == "GeluErf":
        inits += [numpy_helper.from_array(np.array(np.sqrt(2.0), np.float32), "sqrt2"),
                  numpy_helper.from_array(np.array(1.0, np.float32), "one"),
                  numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    if gemm:
        nodes.append(mk("Gemm", ["a", "W2", "B2"], ["out"], name="fc2_gemm", transB=1, alpha=0.75, beta=1.5))
    else:
        nodes += [mk("MatMul", ["a", "W2"], ["o0"], name="fc2_matmul"),
                  mk("Add", ["o0", "B2"], ["out"], name="fc2_add")]
    m = _model(nodes, [_vi("X", [N, D_IN])], [_vi("out", [N, d_out])], inits, opset, ms)
    return m, ["W1", "B1", "W2", "B2"]


def _mlp_inputs(seed: int, loss, d_out: int = D_OUT) -> dict[str, np.ndarray]:
    rng = _rng(1000 + seed)
    x = rng.standard_normal((N, D_IN)).astype(np.float32)
    if loss[0] == "mse":
        return {"X": x, "target": rng.standard_normal((N, d_out)).astype(np.float32)}
    labels = rng.integers(0, d_out, size=N).astype(np.int64)
    if loss[0] == "ce" and loss[2] is not None:
        labels[labels == loss[2]] = (loss[2] + 1) % d_out
        labels[1] = loss[2]  # exactly one ignored row
    return {"X": x, "labels": labels}


# --- softmax families: X[2,3,4] -> MatMul W[4,4] -> (Log)Softmax -> Mul S -> MSE --


def softmax(op: str, opset: int, axis, seed: int) -> tuple[onnx.ModelProto, list[str]]:
    rng = _rng(seed)
    mk = helper.make_node
    attrs = {} if axis is None else {"axis": axis}
    nodes = [mk("MatMul", ["X", "W"], ["z"], name="proj"),
             mk(op, ["z"], ["p"], name=op.lower() + "0", **attrs),
             mk("Mul", ["p", "S"], ["out"], name="scale_out")]
    inits = [_init(rng, "W", [4, 4], 1.0), _init(rng, "S", [4], 1.0)]
    m = _model(nodes, [_vi("X", [2, 3, 4])], [_vi("out", [2, 3, 4])], inits, opset)
    return m, ["W", "S"]


def _softmax_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = _rng(1000 + seed)
    return {"X": rng.standard_normal((2, 3, 4)).astype(np.float32),
            "target": rng.standard_normal((2, 3, 4)).astype(np.float32)}


# --- LSTM: X[T=5,B=2,I=3] -> LSTM(H=4) -> Y[5,1,2,4] -> MSE --------------------

T, B, I, H = 5, 2, 3, 4


def lstm(seed: int, *, bias: bool, init_state: str, outputs: str = "Y",
         opset: int = 17) -> tuple[onnx.ModelProto, list[str], list]:
    """init_state: 'none' | 'input' (user inputs h0, c0) | 'param' (trainable h0, c0).
    outputs: 'Y' (loss on Y) or 'Y+Yh+Yc' (Y, Y_h and Y_c all reach the loss)."""
    rng = _rng(seed)
    mk = helper.make_node
    inits = [_init(rng, "W", [1, 4 * H, I]), _init(rng, "R", [1, 4 * H, H])]
    params = ["W", "R"]
    if bias:
        inits.append(_init(rng, "Bias", [1, 8 * H], 0.2))
        params.append("Bias")
    graph_inputs = [_vi("X", [T, B, I])]
    if init_state == "param":
        inits += [_init(rng, "h0", [1, B, H]), _init(rng, "c0", [1, B, H])]
        params += ["h0", "c0"]
    elif init_state == "input":
        graph_inputs += [_vi("h0", [1, B, H]), _vi("c0", [1, B, H])]
    states = ["h0", "c0"] if init_state != "none" else ["", ""]
    # all 7 input slots spelled out: ORT's LSTM gradient builder copies inputs
    # positionally and builds a wrong LSTMGrad from a shorter input list
    lstm_in = ["X", "W", "R", "Bias" if bias else "", ""] + states
    if outputs == "Y":
        nodes = [mk("LSTM", lstm_in, ["out"], name="lstm0", hidden_size=H)]
        outs = [_vi("out", [T, 1, B, H])]
    else:
        nodes = [mk("LSTM", lstm_in, ["Y", "Y_h", "Y_c"], name="lstm0", hidden_size=H),
                 mk("ReduceSum", ["Y", "axes0"], ["Ys"], name="sum_time", keepdims=0),
                 mk("Mul", ["Y_c", "half"], ["Yc2"], name="half_c"),
                 mk("Add", ["Ys", "Y_h"], ["s1"], name="add_h"),
                 mk("Add", ["s1", "Yc2"], ["out"], name="add_c")]
        inits += [numpy_helper.from_array(np.array([0], np.int64), "axes0"),
                  numpy_helper.from_array(np.array(0.5, np.float32), "half")]
        outs = [_vi("out", [1, B, H])]
    m = _model(nodes, graph_inputs, outs, inits, opset)
    return m, params, [o.type.tensor_type.shape for o in outs]


def _lstm_inputs(seed: int, init_state: str, out_shape) -> dict[str, np.ndarray]:
    rng = _rng(1000 + seed)
    d = {"X": rng.standard_normal((T, B, I)).astype(np.float32)}
    if init_state == "input":
        d["h0"] = (rng.standard_normal((1, B, H)) * 0.5).astype(np.float32)
        d["c0"] = (rng.standard_normal((1, B, H)) * 0.5).astype(np.float32)
    d["target"] = rng.standard_normal(out_shape).astype(np.float32)
    return d


# --- models that compute their own loss (loss=None in generate_artifacts) ------


def ce_weighted(opset: int, seed: int, reduction: str) -> tuple[onnx.ModelProto, list[str]]:
    """MLP -> SoftmaxCrossEntropyLoss with class weights and ignore_index, written in
    the model (onnxblock's CrossEntropyLoss cannot take a weight array)."""
    rng = _rng(seed)
    mk = helper.make_node
    inits = [_init(rng, "W1", [D_IN, D_H]), _init(rng, "B1", [D_H], 0.1),
             _init(rng, "W2", [D_H, 5]),
             numpy_helper.from_array(np.array([1.0, 0.5, 2.0, 1.5, 0.25], np.float32), "class_w")]
    nodes = [mk("Gemm", ["X", "W1", "B1"], ["h"], name="fc1"),
             mk("Tanh", ["h"], ["a"], name="tanh0"),
             mk("MatMul", ["a", "W2"], ["logits"], name="fc2"),
             mk("SoftmaxCrossEntropyLoss", ["logits", "labels", "class_w"], ["loss", "log_prob"],
                name="sce", reduction=reduction, ignore_index=3)]
    m = _model(nodes, [_vi("X", [N, D_IN]), _vi("labels", [N], INT64)], [_vi("loss", [])], inits, opset)
    return m, ["W1", "B1", "W2"]


def shapes_model(opset: int, seed: int) -> tuple[onnx.ModelProto, list[str]]:
    """Reshape / Transpose / Unsqueeze / Squeeze / ReduceMean / ReduceSum / Sub / Div /
    Exp / Log / Neg / Pow / Sqrt / Identity, so that the reduction and shape
    gradients (Shape, Expand, ...) show up.  Loss computed in the model (mean of squares)."""
    rng = _rng(seed)
    mk = helper.make_node
    i64 = lambda v, n: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    f32 = lambda v, n: numpy_helper.from_array(np.array(v, np.float32), n)  # noqa: E731
    inits = [_init(rng, "W", [6, 4]), _init(rng, "V", [4], 0.3),
             i64([2, 2, 6], "shape_226"), i64([1], "axes1"), i64([0], "axes0"),
             f32(2.0, "two"), f32(3.0, "three")]
    reduce_axes = {"axes": [-1]} if opset < 18 else {}
    rm_inputs = ["q"] if opset < 18 else ["q", "axes_last"]
    if opset >= 18:
        inits.append(i64([-1], "axes_last"))
    nodes = [
        mk("Reshape", ["X", "shape_226"], ["xr"], name="reshape0"),       # [2,2,6]
        mk("Transpose", ["xr"], ["xt"], name="transpose0", perm=[1, 0, 2]),
        mk("MatMul", ["xt", "W"], ["m"], name="matmul0"),                  # [2,2,4]
        mk("Sub", ["m", "V"], ["s"], name="sub0"),
        mk("Div", ["s", "three"], ["d"], name="div0"),
        mk("Exp", ["d"], ["e"], name="exp0"),
        mk("Log", ["e"], ["l"], name="log0"),
        mk("Neg", ["l"], ["n"], name="neg0"),
        mk("Unsqueeze", ["n", "axes1"], ["u"], name="unsqueeze0"),         # [2,1,2,4]
        mk("Squeeze", ["u", "axes1"], ["sq"], name="squeeze0"),
        mk("Identity", ["sq"], ["idn"], name="identity0"),
        mk("Mul", ["idn", "V"], ["q"], name="mul0"),
        mk("ReduceMean", rm_inputs, ["r"], name="reducemean0", keepdims=1, **reduce_axes),  # [2,2,1]
        mk("Sub", ["q", "r"], ["c"], name="center"),
        mk("Pow", ["c", "two"], ["p"], name="pow0"),
        mk("ReduceSum", ["p", "axes0"], ["rs"], name="reducesum0", keepdims=0),  # [2,4]
        mk("Sqrt", ["rs"], ["sqr"], name="sqrt0"),
        mk("ReduceMean", ["sqr"], ["loss"], name="reducemean_all", keepdims=0),
    ]
    m = _model(nodes, [_vi("X", [4, 6])], [_vi("loss", [])], inits, opset)
    return m, ["W", "V"]


def elementwise_misc(opset: int, seed: int) -> tuple[onnx.ModelProto, list[str]]:
    """Elementwise ops ORT differentiates but gradir has no op for (Reciprocal, Abs,
    Sin, Cos, Erf; their gradients bring Sign, ...): a fixture for the importer's
    one-error-listing-every-unsupported-node path."""
    rng = _rng(seed)
    mk = helper.make_node
    inits = [_init(rng, "W", [3]), numpy_helper.from_array(np.array(3.0, np.float32), "three")]
    nodes = [mk("Mul", ["X", "W"], ["xw"], name="mul0"),
             mk("Abs", ["xw"], ["ab"], name="abs0"),
             mk("Add", ["ab", "three"], ["sh"], name="shift"),
             mk("Reciprocal", ["sh"], ["rc"], name="reciprocal0"),
             mk("Sin", ["rc"], ["sn"], name="sin0"),
             mk("Cos", ["sn"], ["cs"], name="cos0"),
             mk("Erf", ["cs"], ["ef"], name="erf0"),
             mk("ReduceSum", ["ef"], ["loss"], name="sum_all", keepdims=0)]
    m = _model(nodes, [_vi("X", [2, 3])], [_vi("loss", [])], inits, opset)
    return m, ["W"]


# --- PyTorch-exported forward models (export_torch.py wrote them; no torch needed here)

TORCH_DIR = Path(__file__).resolve().parent / "torch_models"
TORCH_CASES = [  # name, what, loss, extra user inputs
    ("torch_mlp_gelu", "PyTorch Linear-GELU-Linear (erf GELU as PyTorch writes it, Gemm, Constant nodes), MSE loss",
     ("mse", "mean")),
    ("torch_mlp_gelu_tanh", "PyTorch Linear-GELU(approximate=tanh)-Linear, MSE loss", ("mse", "mean")),
    ("torch_mlp_relu", "PyTorch Linear-ReLU-Linear (Gemm transB=1), SoftmaxCrossEntropyLoss (mean) added by onnxblock",
     ("ce", "mean", None)),
    ("torch_mlp_ce_in_model", "PyTorch MLP (Tanh) whose forward computes nn.CrossEntropyLoss(ignore_index=1)",
     ("own",)),
    ("torch_lstm", "PyTorch nn.LSTM(3, 4) + Linear head (initial states from Shape/Gather/Concat/Expand of zeros), "
     "MSE loss", ("mse", "mean")),
    ("torch_flatten_softmax", "PyTorch Flatten-Linear, log_softmax(dim=-1) + softmax(dim=1), opset 13, MSE loss",
     ("mse", "mean")),
    # issue #31 (export_torch.py: TorchScript exporter unless *_dynamo; Dropout seeds added)
    ("torch_encoder_layer_train", "PyTorch nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True) "
     "on X[2, 8, 16], exported in training mode (seeded Dropouts), MSE loss", ("mse", "mean")),
    ("torch_encoder_layer_eval", "PyTorch nn.TransformerEncoderLayer(16, 2, 32, dropout=0, batch_first=True), "
     "exported in eval mode, MSE loss", ("mse", "mean")),
    ("torch_embed_ln_bn_dropout", "PyTorch nn.Embedding(20, 16)-Linear(bias=False)-nn.BatchNorm1d-ReLU-"
     "nn.Dropout(0.1)-nn.LayerNorm-Linear on ids[8], training mode (running stats frozen), CrossEntropyLoss by "
     "onnxblock",
     ("ce", "mean", None)),
    ("torch_mha_causal", "PyTorch nn.MultiheadAttention(16, 2, batch_first=True) self-attention with a causal "
     "bool attn_mask, eval mode, MSE loss", ("mse", "mean")),
    ("torch_encoder_layer_dynamo", "PyTorch nn.TransformerEncoderLayer(16, 2, 32, dropout=0) by the dynamo "
     "exporter (opset 18, optimize=False), MSE loss", ("mse", "mean")),
    ("torch_encoder_layer_train_dynamo", "PyTorch nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1) by the "
     "dynamo exporter in training mode (opset 18, seeded Dropouts), MSE loss", ("mse", "mean")),
    ("torch_embed_ln_bn_dropout_dynamo", "torch_embed_ln_bn_dropout by the dynamo exporter (opset 18), "
     "CrossEntropyLoss by onnxblock", ("ce", "mean", None)),
    # issue #32 (export_torch_gru_cnn.py)
    ("torch_gru", "PyTorch nn.GRU(4, 6, num_layers=2) (zero initial state from Shape/Gather/Concat/Expand) + Linear "
     "on the last step, eval-mode export (the weights' gate reordering constant-folded), CrossEntropyLoss by "
     "onnxblock", ("ce", "mean", None)),
    ("torch_gru_unfolded", "torch_gru exported without constant folding: each GRU's W, R, B are Slice/Concat/"
     "Unsqueeze of torch's weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, CrossEntropyLoss by onnxblock",
     ("ce", "mean", None)),
    ("torch_gru_dynamo", "torch_gru by the dynamo exporter (opset 18, optimize=False), CrossEntropyLoss by onnxblock",
     ("ce", "mean", None)),
    ("torch_cnn", "PyTorch nn.Conv2d(3, 8, 3, no bias)-nn.BatchNorm2d (training mode, running stats frozen)-ReLU-"
     "nn.MaxPool2d(2) -> nn.Conv2d(8, 8, 3)-ReLU -> nn.AdaptiveAvgPool2d(1) -> nn.Flatten -> "
     "nn.Linear(8, 5), CrossEntropyLoss by onnxblock", ("ce", "mean", None)),
    ("torch_cnn_dynamo", "torch_cnn by the dynamo exporter (opset 18, training mode; AdaptiveAvgPool2d written as "
     "ReduceMean), CrossEntropyLoss by onnxblock", ("ce", "mean", None)),
    ("torch_gru_batch_first", "PyTorch nn.GRU(4, 5, batch_first=True) (Transposes around the GRU), initial state "
     "h0 a model input, mean over time of its output plus its last state -> Linear, CrossEntropyLoss by onnxblock",
     ("ce", "mean", None)),
    ("torch_cnn1d", "PyTorch nn.ReflectionPad1d(2) (a reflect Pad on X, its pads computed by a Slice/Transpose/Cast "
     "subgraph) -> nn.Conv1d(3, 6, 5, stride 2)-ReLU -> nn.AvgPool1d(3, 2, padding 1) -> nn.Conv1d(6, 4, 3, groups 2, "
     "dilation 2)-ReLU -> nn.AdaptiveAvgPool1d(1) -> flatten -> Linear; the batch dimension of the output symbolic, "
     "CrossEntropyLoss by onnxblock", ("ce", "mean", None)),
    ("torch_cnn1d_dynamo", "torch_cnn1d by the dynamo exporter (opset 18; AdaptiveAvgPool1d written as ReduceMean), "
     "CrossEntropyLoss by onnxblock", ("ce", "mean", None)),
]


def _random_like(rng, vi) -> np.ndarray:
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    return rng.standard_normal(shape).astype(np.float32)


def torch_cases() -> list[Case]:
    out = []
    for k, (name, what, loss) in enumerate(TORCH_CASES):
        m = onnx.load(TORCH_DIR / f"{name}.onnx")
        rng = _rng(2000 + k)
        opset = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")][0]
        # float tensors are parameters, but for an additive attention mask (-inf: a constant)
        float_inits = [t.name for t in m.graph.initializer if t.data_type == FLOAT and t.dims
                       and np.all(np.isfinite(numpy_helper.to_array(t)))]
        frozen = [n for n in float_inits if "running_" in n]  # BatchNorm1d's statistics
        params = [n for n in float_inits if n not in frozen]
        inputs = {}
        for vi in m.graph.input:
            if vi.name == "ids":  # nn.Embedding's indices
                vocab = [t for t in m.graph.initializer if t.name == "emb.weight"][0].dims[0]
                shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
                inputs[vi.name] = rng.integers(0, vocab, size=shape).astype(np.int64)
            elif vi.type.tensor_type.elem_type == INT64:  # labels of the in-model loss
                d_out = [t for t in m.graph.initializer if t.name.endswith("fc2.bias")][0].dims[0]
                labels = rng.integers(0, d_out, size=vi.type.tensor_type.shape.dim[0].dim_value).astype(np.int64)
                labels[labels == 1] = 0
                labels[2] = 1  # exactly one ignored row
                inputs[vi.name] = labels
            else:
                inputs[vi.name] = _random_like(rng, vi)
        out_vi = m.graph.output[0]
        if loss[0] == "mse":
            inputs["target"] = _random_like(rng, out_vi)
        elif loss[0] == "ce":
            shape = [d.dim_value for d in out_vi.type.tensor_type.shape.dim]
            if shape[0] == 0:  # a symbolic batch (torch_cnn1d): the first input's
                shape[0] = next(iter(inputs.values())).shape[0]
            inputs["labels"] = rng.integers(0, shape[-1], size=shape[:-1]).astype(np.int64)
        out.append(Case(name, what, opset, m, loss, inputs, params, frozen))
    return out


# --- the list ---------------------------------------------------------------------


def _mlp_case(name, what, act, opset, seed, loss=("mse", "mean"), gemm=False, d_out=D_OUT):
    m, params = mlp(act, opset, seed, gemm=gemm, loss=loss, d_out=d_out)
    return Case(name, what, opset, m, loss, _mlp_inputs(seed, loss, d_out), params)


def cases() -> list[Case]:
    out: list[Case] = []
    acts = [("relu", "Relu", 17), ("sigmoid", "Sigmoid", 17), ("tanh", "Tanh", 17),
            ("leakyrelu", "LeakyRelu", 17), ("gelu_ms", "GeluMS", 17),
            ("gelu_erf", "GeluErf", 17), ("fastgelu", "FastGelu", 17),
            ("quickgelu", "QuickGelu", 17), ("biasgelu", "BiasGelu", 17),
            ("fastgelu_bias", "FastGeluBias", 17), ("gelu_onnx20", "GeluOnnx", 20),
            ("gelu_onnx20_tanh", "GeluOnnxTanh", 20)]
    for i, (tag, act, opset) in enumerate(acts):
        what = f"MLP 6-8-3 with {ACT_WHAT.get(act, act)}, MSE loss (mean)"
        out.append(_mlp_case(f"mlp_{tag}", what, act, opset, 10 + i))
    out.append(_mlp_case("mlp_relu_gemm_opset12", "MLP with Relu and Gemm(transB=1, alpha=.75, beta=1.5), "
                         "MSE loss (mean), opset 12", "Relu", 12, 30, gemm=True))
    frozen = _mlp_case("mlp_sigmoid_frozen_b1", "MLP with Sigmoid, B1 frozen (a parameter input "
                       "without gradient), MSE loss (mean)", "Sigmoid", 17, 32)
    frozen.params.remove("B1")
    frozen.frozen.append("B1")
    out.append(frozen)
    out.append(_mlp_case("mlp_tanh_mse_sum", "MLP with Tanh, MSE loss (sum)", "Tanh", 17, 31, loss=("mse", "sum")))
    for i, (tag, loss, opset) in enumerate([
            ("ce_mean", ("ce", "mean", None), 17), ("ce_sum", ("ce", "sum", None), 17),
            ("ce_mean_ignore", ("ce", "mean", 2), 17), ("ce_sum_ignore", ("ce", "sum", 4), 13),
            ("ce_mean_opset12", ("ce", "mean", None), 12)]):
        what = f"MLP with Relu, SoftmaxCrossEntropyLoss (reduction={loss[1]}"
        what += f", ignore_index={loss[2]})" if loss[2] is not None else ")"
        out.append(_mlp_case(f"mlp_relu_{tag}", what + f", opset {opset}", "Relu", opset, 40 + i,
                             loss=loss, d_out=5))
    for reduction, seed in (("mean", 50), ("sum", 51)):
        m, params = ce_weighted(17, seed, reduction)
        rng = _rng(1000 + seed)
        labels = rng.integers(0, 5, size=N).astype(np.int64)
        labels[labels == 3] = 4
        labels[2] = 3  # exactly one ignored row
        out.append(Case(f"ce_weighted_{reduction}", "MLP (Gemm, Tanh) with SoftmaxCrossEntropyLoss in the model: "
                        f"class weights, ignore_index=3, reduction={reduction}", 17, m, ("own",),
                        {"X": rng.standard_normal((N, D_IN)).astype(np.float32), "labels": labels}, params))
    for opset in (12, 13):
        for op in ("Softmax", "LogSoftmax"):
            for axis in (None, 1, -1):
                if opset == 13 and axis == -1:
                    continue  # same as the default at 13
                seed = 60 + len(out)
                m, params = softmax(op, opset, axis, seed)
                ax = "default" if axis is None else str(axis)
                out.append(Case(f"{op.lower()}_opset{opset}_axis{ax.replace('-', 'm')}",
                                f"{op} (axis {ax}) over a [2,3,4] tensor at opset {opset}, MSE loss",
                                opset, m, ("mse", "mean"), _softmax_inputs(seed), params))
    for tag, bias, init_state, outputs in [
            ("nobias_nostate", False, "none", "Y"), ("bias_nostate", True, "none", "Y"),
            ("bias_state_input", True, "input", "Y"), ("nobias_state_param", False, "param", "Y"),
            ("bias_state_param_all_outputs", True, "param", "Y+Yh+Yc")]:
        seed = 80 + len(out)
        m, params, shapes = lstm(seed, bias=bias, init_state=init_state, outputs=outputs)
        out_shape = [d.dim_value for d in shapes[0].dim]
        what = (f"LSTM(hidden 4) over X[5,2,3], {'with' if bias else 'without'} bias, initial states: "
                f"{init_state}; loss on {outputs} (MSE)")
        out.append(Case(f"lstm_{tag}", what, 17, m, ("mse", "mean"),
                        _lstm_inputs(seed, init_state, out_shape), params))
    for opset in (13, 18):
        m, params = shapes_model(opset, 90 + opset)
        rng = _rng(1090 + opset)
        out.append(Case(f"shapes_opset{opset}", "Reshape/Transpose/Unsqueeze/Squeeze/Reduce*/Sub/Div/Exp/Log/Neg/"
                        f"Pow/Sqrt/Identity chain, loss in the model, opset {opset}", opset, m, ("own",),
                        {"X": rng.standard_normal((4, 6)).astype(np.float32)}, params))
    m, params = elementwise_misc(17, 97)
    out.append(Case("elementwise_misc", "Abs/Reciprocal/Sin/Cos/Erf chain (ORT differentiates them; gradir "
                    "has no such ops: for the unsupported-node error), loss in the model", 17, m, ("own",),
                    {"X": _rng(1097).standard_normal((2, 3)).astype(np.float32)}, params))
    import models_gru_cnn  # the GRU and convolutional networks of issue #32 (it imports this module)
    import models_nets  # the whole networks of issue #31 (it imports this module)

    return out + torch_cases() + models_nets.cases() + models_gru_cnn.cases()


CaseFn = Callable[[], list[Case]]
