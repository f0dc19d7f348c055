"""Whole small networks behind tests/data/onnx/ (issue #31): a GPT-style block, MLPs with
BatchNormalization / LayerNormalization and seeded Dropout, an LSTM tagger, written with
onnx.helper at opset 17 (18 for the `Split(num_outputs=)` variant).  models.py appends them
to its case list.

Sizes are small (B=2, T=8, C=16, 2 heads, MLP 32, V=50) so every file stays well under 200 KB.
Every Dropout carries a `seed` attribute: without one ORT seeds its generator from the clock
and the fixtures would change from run to run.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from models import INT64, Case, _init, _model, _rng, _vi

mk = helper.make_node


def _f32(v, name):
    return numpy_helper.from_array(np.array(v, np.float32), name)


def _i64(v, name):
    return numpy_helper.from_array(np.array(v, np.int64), name)


# --- GPT-style block ------------------------------------------------------------------

GB, GT, GC, GH, GF, GV = 2, 8, 16, 2, 32, 50  # batch, context, width, heads, MLP, vocabulary
GD = GC // GH


def _layer_norm(x, g, b, out, name):
    """All three outputs spelled out: ORT 1.19.2's gradient builder reads Mean and InvStdDev from the
    forward node and fails (`i < node_->OutputDefs().size()`) when the node has only Y."""
    return mk("LayerNormalization", [x, g, b], [out, f"{name}_mean", f"{name}_inv_std_dev"], name=name, axis=-1,
              epsilon=1e-5)


def _tanh_gelu(x, out, p):
    """GPT-2's gelu: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3))))."""
    return [mk("Pow", [x, "three"], [f"{p}_pow"], name=f"{p}_pow"),
            mk("Mul", [f"{p}_pow", "c_044715"], [f"{p}_cube"], name=f"{p}_mul_c"),
            mk("Add", [x, f"{p}_cube"], [f"{p}_inner"], name=f"{p}_add_x"),
            mk("Mul", [f"{p}_inner", "sqrt_2_over_pi"], [f"{p}_scaled"], name=f"{p}_mul_s"),
            mk("Tanh", [f"{p}_scaled"], [f"{p}_tanh"], name=f"{p}_tanh"),
            mk("Add", [f"{p}_tanh", "one"], [f"{p}_1p"], name=f"{p}_add_1"),
            mk("Mul", [x, f"{p}_1p"], [f"{p}_x1p"], name=f"{p}_mul_x"),
            mk("Mul", [f"{p}_x1p", "half"], [out], name=f"{p}_mul_half")]


def gpt_block(seed: int, *, qkv: str, mask: str, pos: str, own_loss: bool,
              opset: int = 17) -> tuple[onnx.ModelProto, list[str]]:
    """qkv: 'split' (Split with sizes as an input), 'split18' (Split(num_outputs=3), opset 18) or
    'slice' (three Slices); mask: 'where_inf' (Where(bool tril, scores, -inf)) or 'trilu'
    (Trilu(ones) == 0 -> Where(., -1e9, scores), masked_fill as PyTorch writes it);
    pos: 'gather' (Gather of wpe by constant positions) or 'add' (wpe [T, C] added as is).
    own_loss: the model ends in SoftmaxCrossEntropyLoss (else onnxblock's CrossEntropyLoss is put on top
    of the [B*T, V] logits)."""
    rng = _rng(seed)
    inits = [_init(rng, "wte", [GV, GC], 0.3), _init(rng, "wpe", [GT, GC], 0.1),
             _init(rng, "ln1.weight", [GC], 0.1), _init(rng, "ln1.bias", [GC], 0.1),
             _init(rng, "attn.c_attn.weight", [GC, 3 * GC], 0.25), _init(rng, "attn.c_attn.bias", [3 * GC], 0.05),
             _init(rng, "attn.c_proj.weight", [GC, GC], 0.25), _init(rng, "attn.c_proj.bias", [GC], 0.05),
             _init(rng, "ln2.weight", [GC], 0.1), _init(rng, "ln2.bias", [GC], 0.1),
             _init(rng, "mlp.c_fc.weight", [GC, GF], 0.25), _init(rng, "mlp.c_fc.bias", [GF], 0.05),
             _init(rng, "mlp.c_proj.weight", [GF, GC], 0.25), _init(rng, "mlp.c_proj.bias", [GC], 0.05),
             _init(rng, "ln_f.weight", [GC], 0.1), _init(rng, "ln_f.bias", [GC], 0.1)]
    # LayerNorm gains around 1, as trained models have them
    for t in inits:
        if t.name.startswith("ln") and t.name.endswith("weight"):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) + np.float32(1.0), t.name))
    params = [t.name for t in inits]
    consts = [_f32(3.0, "three"), _f32(0.044715, "c_044715"), _f32(np.sqrt(2.0 / np.pi), "sqrt_2_over_pi"),
              _f32(1.0, "one"), _f32(0.5, "half"), _f32(1.0 / np.sqrt(GD), "att_scale"),
              _i64([GB, GT, GH, GD], "heads_shape"), _i64([GB, GT, GC], "merge_shape"),
              _i64([-1, GV], "logits_shape")]
    nodes = [mk("Gather", ["wte", "ids"], ["tok"], name="wte_gather", axis=0)]
    if pos == "gather":
        consts.append(_i64(np.arange(GT), "pos_ids"))
        nodes += [mk("Gather", ["wpe", "pos_ids"], ["pos_emb"], name="wpe_gather", axis=0),
                  mk("Add", ["tok", "pos_emb"], ["x0"], name="embed_add")]
    else:
        nodes.append(mk("Add", ["tok", "wpe"], ["x0"], name="embed_add"))
    nodes += [_layer_norm("x0", "ln1.weight", "ln1.bias", "h1", "ln1"),
              mk("MatMul", ["h1", "attn.c_attn.weight"], ["qkv0"], name="c_attn_matmul"),
              mk("Add", ["qkv0", "attn.c_attn.bias"], ["qkv"], name="c_attn_add")]
    if qkv == "split":
        consts.append(_i64([GC, GC, GC], "qkv_split"))
        nodes.append(mk("Split", ["qkv", "qkv_split"], ["q0", "k0", "v0"], name="qkv_split", axis=2))
    elif qkv == "split18":
        nodes.append(mk("Split", ["qkv"], ["q0", "k0", "v0"], name="qkv_split", axis=-1, num_outputs=3))
    else:
        consts += [_i64([-1], "axes_last")] + [_i64([i * GC], f"start_{i}") for i in range(3)]
        for i, t in enumerate(("q0", "k0", "v0")):
            end = f"start_{i + 1}" if i < 2 else "end_last"
            if i == 2:
                consts.append(_i64([np.iinfo(np.int64).max], "end_last"))  # clamped, as PyTorch writes [2C:]
            nodes.append(mk("Slice", ["qkv", f"start_{i}", end, "axes_last"], [t], name=f"slice_{t[0]}"))
    for t in ("q", "k", "v"):
        nodes.append(mk("Reshape", [f"{t}0", "heads_shape"], [f"{t}1"], name=f"{t}_heads"))
    nodes += [mk("Transpose", ["q1"], ["q"], name="q_t", perm=[0, 2, 1, 3]),
              mk("Transpose", ["k1"], ["kT"], name="k_t", perm=[0, 2, 3, 1]),
              mk("Transpose", ["v1"], ["v"], name="v_t", perm=[0, 2, 1, 3]),
              mk("MatMul", ["q", "kT"], ["s0"], name="qk_matmul"),
              mk("Mul", ["s0", "att_scale"], ["s"], name="qk_scale")]
    if mask == "where_inf":
        consts += [numpy_helper.from_array(np.tril(np.ones((GT, GT), bool)), "causal_mask"),
                   _f32(-np.inf, "neg_inf")]
        nodes.append(mk("Where", ["causal_mask", "s", "neg_inf"], ["s_masked"], name="mask_where"))
    else:
        consts += [_f32(np.ones((GT, GT)), "ones_tt"), _f32(0.0, "zero"), _f32(-1e9, "neg_big")]
        nodes += [mk("Trilu", ["ones_tt"], ["tril"], name="tril", upper=0),
                  mk("Equal", ["tril", "zero"], ["above"], name="mask_equal"),
                  mk("Where", ["above", "neg_big", "s"], ["s_masked"], name="mask_where")]
    nodes += [mk("Softmax", ["s_masked"], ["p"], name="att_softmax", axis=-1),
              mk("MatMul", ["p", "v"], ["y0"], name="pv_matmul"),
              mk("Transpose", ["y0"], ["y1"], name="y_t", perm=[0, 2, 1, 3]),
              mk("Reshape", ["y1", "merge_shape"], ["y2"], name="y_merge"),
              mk("MatMul", ["y2", "attn.c_proj.weight"], ["a0"], name="c_proj_matmul"),
              mk("Add", ["a0", "attn.c_proj.bias"], ["a1"], name="c_proj_add"),
              mk("Add", ["x0", "a1"], ["x1"], name="resid1"),
              _layer_norm("x1", "ln2.weight", "ln2.bias", "h2", "ln2"),
              mk("MatMul", ["h2", "mlp.c_fc.weight"], ["f0"], name="c_fc_matmul"),
              mk("Add", ["f0", "mlp.c_fc.bias"], ["f1"], name="c_fc_add")]
    nodes += _tanh_gelu("f1", "g", "gelu")
    nodes += [mk("MatMul", ["g", "mlp.c_proj.weight"], ["m0"], name="mlp_proj_matmul"),
              mk("Add", ["m0", "mlp.c_proj.bias"], ["m1"], name="mlp_proj_add"),
              mk("Add", ["x1", "m1"], ["x2"], name="resid2"),
              _layer_norm("x2", "ln_f.weight", "ln_f.bias", "hf", "ln_f"),
              mk("Transpose", ["wte"], ["wte_t"], name="tied_t", perm=[1, 0]),
              mk("MatMul", ["hf", "wte_t"], ["logits3"], name="lm_head"),
              mk("Reshape", ["logits3", "logits_shape"], ["logits"], name="logits_flat")]
    inputs = [_vi("ids", [GB, GT], INT64)]
    if own_loss:
        consts.append(_i64([-1], "labels_shape"))
        nodes += [mk("Reshape", ["labels", "labels_shape"], ["labels_flat"], name="labels_flat"),
                  mk("SoftmaxCrossEntropyLoss", ["logits", "labels_flat"], ["loss", "log_prob"], name="sce",
                     reduction="mean")]
        inputs.append(_vi("labels", [GB, GT], INT64))
        outputs = [_vi("loss", [])]
    else:
        outputs = [_vi("logits", [GB * GT, GV])]
    return _model(nodes, inputs, outputs, inits + consts, opset), params


def _gpt_inputs(seed: int, own_loss: bool) -> dict[str, np.ndarray]:
    rng = _rng(1000 + seed)
    ids = rng.integers(0, GV, size=(GB, GT)).astype(np.int64)
    ids[1, 3] = ids[0, 5]  # a repeated token: its embedding gradient sums two rows
    labels = np.roll(ids, -1, axis=1)  # next-token targets
    labels[:, -1] = rng.integers(0, GV, size=GB)
    return {"ids": ids, "labels": labels if own_loss else labels.reshape(-1)}


# --- MLPs with normalization and seeded Dropout ------------------------------------------

MN, MI, MH, MK = 8, 6, 16, 5  # rows, inputs, hidden, classes


def mlp_norm_dropout(seed: int, norm: str) -> tuple[onnx.ModelProto, list[str], list[str]]:
    """norm 'bn': MatMul-BatchNormalization(training_mode=1)-Relu-Dropout(seed)-MatMul-Add;
    'ln': MatMul-Add-LayerNormalization-GELU (erf, as PyTorch writes it)-Dropout(seed)-MatMul-Add.
    The BN Dropout has one output (as PyTorch writes it), the LN one also its mask."""
    rng = _rng(seed)
    inits = [_init(rng, "W1", [MI, MH]), _init(rng, "B1", [MH], 0.1)]
    frozen = []
    nodes = [mk("MatMul", ["X", "W1"], ["h0"], name="fc1_matmul"), mk("Add", ["h0", "B1"], ["h"], name="fc1_add")]
    if norm == "bn":  # no bias before the batch norm (its gradient would be zero up to rounding)
        inits = inits[:1]
        nodes = [mk("MatMul", ["X", "W1"], ["h"], name="fc1_matmul")]
        inits += [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(MH)).astype(np.float32), "bn.weight"),
                  _init(rng, "bn.bias", [MH], 0.1),
                  _init(rng, "bn.running_mean", [MH], 0.1),
                  numpy_helper.from_array((1 + 0.2 * rng.random(MH)).astype(np.float32), "bn.running_var")]
        frozen = ["bn.running_mean", "bn.running_var"]
        nodes += [mk("BatchNormalization", ["h", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
                     ["n", "bn.running_mean_out", "bn.running_var_out"], name="bn", epsilon=1e-5, momentum=0.9,
                     training_mode=1),
                  mk("Relu", ["n"], ["a"], name="relu0")]
        drop = mk("Dropout", ["a", "ratio", "training_mode"], ["d", "dropout0_mask"], name="dropout0", seed=7)
        ratio = 0.25
    else:
        inits += [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(MH)).astype(np.float32), "ln.weight"),
                  _init(rng, "ln.bias", [MH], 0.1)]
        nodes += [_layer_norm("h", "ln.weight", "ln.bias", "n", "ln"),
                  mk("Div", ["n", "sqrt2"], ["g_div"], name="gelu_div"),
                  mk("Erf", ["g_div"], ["g_erf"], name="gelu_erf"),
                  mk("Add", ["g_erf", "one"], ["g_add"], name="gelu_add"),
                  mk("Mul", ["n", "g_add"], ["g_mul"], name="gelu_mul"),
                  mk("Mul", ["g_mul", "half"], ["a"], name="gelu_mul2")]
        drop = mk("Dropout", ["a", "ratio", "training_mode"], ["d", "dropout0_mask"], name="dropout0", seed=11)
        ratio = 0.1
    inits += [_init(rng, "W2", [MH, MK]), _init(rng, "B2", [MK], 0.1)]
    consts = [_f32(ratio, "ratio"), numpy_helper.from_array(np.array(True), "training_mode"),
              _f32(np.sqrt(2.0), "sqrt2"), _f32(1.0, "one"), _f32(0.5, "half")]
    if norm == "bn":
        consts = consts[:2]
    nodes += [drop, mk("MatMul", ["d", "W2"], ["o0"], name="fc2_matmul"), mk("Add", ["o0", "B2"], ["out"],
                                                                             name="fc2_add")]
    m = _model(nodes, [_vi("X", [MN, MI])], [_vi("out", [MN, MK])], inits + consts, 17)
    params = [t.name for t in inits if t.name not in frozen]
    return m, params, frozen


def _mlp_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = _rng(1000 + seed)
    return {"X": rng.standard_normal((MN, MI)).astype(np.float32),
            "labels": rng.integers(0, MK, size=MN).astype(np.int64)}


# --- LSTM tagger ---------------------------------------------------------------------

LT, LB, LV, LE, LH, LK = 6, 2, 20, 5, 8, 4  # time, batch, vocabulary, embedding, hidden, tags


def lstm_tagger(seed: int) -> tuple[onnx.ModelProto, list[str]]:
    """ids [T, B] -> Gather(emb) -> LSTM (7 input slots, bias) -> Squeeze dir -> MatMul-Add -> [T*B, K]."""
    rng = _rng(seed)
    inits = [_init(rng, "emb", [LV, LE]), _init(rng, "W", [1, 4 * LH, LE]), _init(rng, "R", [1, 4 * LH, LH]),
             _init(rng, "Bias", [1, 8 * LH], 0.2), _init(rng, "W_out", [LH, LK]), _init(rng, "b_out", [LK], 0.1)]
    params = [t.name for t in inits]
    consts = [_i64([1], "axes_dir"), _i64([-1, LK], "tags_shape")]
    nodes = [mk("Gather", ["emb", "ids"], ["e"], name="emb_gather", axis=0),
             mk("LSTM", ["e", "W", "R", "Bias", "", "", ""], ["Y"], name="lstm0", hidden_size=LH),
             mk("Squeeze", ["Y", "axes_dir"], ["y"], name="squeeze_dir"),
             mk("MatMul", ["y", "W_out"], ["t0"], name="tag_matmul"),
             mk("Add", ["t0", "b_out"], ["t1"], name="tag_add"),
             mk("Reshape", ["t1", "tags_shape"], ["tags"], name="tags_flat")]
    m = _model(nodes, [_vi("ids", [LT, LB], INT64)], [_vi("tags", [LT * LB, LK])], inits + consts, 17)
    return m, params


def cases() -> list[Case]:
    out: list[Case] = []
    for name, what, kw, seed in [
            ("gpt_block", "GPT-style block: Gather token + position embeddings, pre-LayerNormalization, causal "
             "2-head attention (fused QKV split by Split, mask by Where(bool tril, s, -inf)), tanh-GELU MLP "
             "written with Pow(x,3), residuals, final LayerNormalization, tied vocabulary projection "
             "(Transpose of wte), CrossEntropyLoss (mean) added by onnxblock on [B*T, V] logits",
             dict(qkv="split", mask="where_inf", pos="gather", own_loss=False), 300),
            ("gpt_block_slice_trilu", "GPT-style block as gpt_block, QKV split by three Slices (the last end "
             "INT64_MAX), mask by Trilu(ones) == 0 -> Where(., -1e9, s), position table added (no Gather), "
             "SoftmaxCrossEntropyLoss (mean) in the model", dict(qkv="slice", mask="trilu", pos="add",
                                                                  own_loss=True), 301),
            ("gpt_block_opset18", "GPT-style block as gpt_block at opset 18, QKV split by Split(num_outputs=3)",
             dict(qkv="split18", mask="where_inf", pos="gather", own_loss=False, opset=18), 302)]:
        m, params = gpt_block(seed, **kw)
        loss = ("own",) if kw["own_loss"] else ("ce", "mean", None)
        out.append(Case(name, what, kw.get("opset", 17), m, loss, _gpt_inputs(seed, kw["own_loss"]), params))
    m, params, frozen = mlp_norm_dropout(310, "bn")
    out.append(Case("mlp_bn_dropout", "MLP 6-16-5: MatMul, BatchNormalization (training_mode=1, running "
                    "stats frozen), Relu, Dropout(ratio 0.25, seed=7), MatMul-Add, CrossEntropyLoss "
                    "(mean) by onnxblock", 17, m, ("ce", "mean", None), _mlp_inputs(310), params, frozen))
    m, params, _ = mlp_norm_dropout(311, "ln")
    out.append(Case("mlp_ln_dropout", "MLP 6-16-5: MatMul-Add, LayerNormalization, erf GELU, Dropout(ratio 0.1, "
                    "seed=11, mask output), MatMul-Add, CrossEntropyLoss (mean) by onnxblock", 17, m,
                    ("ce", "mean", None), _mlp_inputs(311), params))
    m, params = lstm_tagger(320)
    rng = _rng(1320)
    out.append(Case("lstm_tagger", "LSTM tagger: Gather of an embedding [20, 5] by ids [6, 2], LSTM(hidden 8, "
                    "bias), Squeeze, MatMul-Add to 4 tags, Reshape [-1, 4], CrossEntropyLoss (mean) by onnxblock",
                    17, m, ("ce", "mean", None),
                    {"ids": rng.integers(0, LV, size=(LT, LB)).astype(np.int64),
                     "labels": rng.integers(0, LK, size=LT * LB).astype(np.int64)}, params))
    return out

