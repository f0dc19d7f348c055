"""The GPT-style block of ``bench_graphs.py`` (issue [transformer], "Speed"): token embedding (``Gather``),
a learned position embedding, pre-``LayerNormalization``, causal multi-head attention (an additive
mask), a GELU MLP, residuals, a final LayerNorm, the vocabulary projection tied to the embedding
table, and the mean cross-entropy (``SoftmaxCrossEntropyLoss``) of every position.

The ops are written as an exporter writes them (``Mul`` by the constant 1/sqrt(head size), ``Add`` of
the mask, ``Softmax(axis=-1)``, ``Transpose`` of the keys), so that the benchmark times what an imported
graph gets from the passes (the fused attention among them).

Each of the two new ops has a stand-in (``gather=``, ``layer_norm=``: True, False or None for "when
the op is registered"): without ``Gather`` the token embeddings are an input ([B, T, C],
differentiated; the table still gets the projection's gradient); without ``LayerNormalization``
each LayerNorm is written with ReduceMean/Sub/Mul/Sqrt/Div.  PyTorch and JAX compute the same
function in every form.

``Case.onnx_graph`` is ONNX Runtime's training graph of the same function (the Gather and
LayerNormalization form), ``data/gpt_ort_<scale>.onnx``, which ``bench_graphs.py`` times as a second
gradir column; ``scripts/ort_fixtures/gpt_bench_graph.py`` writes it (the docstring says how).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from graph_cases import F32, Case, _normal

# B, T, C, heads, MLP width, vocabulary
GPT_SIZES = {"full": (8, 256, 512, 8, 2048, 8192), "quick": (2, 64, 128, 4, 512, 1024),
             "tiny": (2, 5, 8, 2, 12, 11)}
EPS = 1e-5
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
PARAMS = ("wte", "wpe", "ln1_g", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo",
          "ln2_g", "ln2_b", "w1", "b1", "w2", "b2", "lnf_g", "lnf_b")


def registered(op: str) -> bool:
    from gradir.ir.op import lookup_op
    return lookup_op(op) is not None


class _Lines:
    """Numbered values ``t0, t1, ...``, each named input remembered by its label."""

    def __init__(self) -> None:
        self.inputs: list[str] = []
        self.body: list[str] = []
        self.name: dict[str, str] = {}
        self.n = 0

    def input(self, label: str, type_: str) -> str:
        v = self.name[label] = f"t{self.n}"
        self.n += 1
        self.inputs.append(f"input {v} : {type_}")
        return v

    def __call__(self, rhs: str, results: int = 1) -> Any:
        names = [f"t{self.n + i}" for i in range(results)]
        self.n += results
        self.body.append(f"{', '.join(names)} = {rhs}")
        return names[0] if results == 1 else names


def _layer_norm(g: _Lines, x: str, scale: str, bias: str, op: bool) -> str:
    if op:
        return g(f"LayerNormalization({x}, {scale}, {bias}, axis=-1, epsilon={EPS})", 3)[0]
    mean = g(f"ReduceMean({x}, axes=[-1], keepdims=true)")
    d = g(f"Sub({x}, {mean})")
    sq = g(f"Mul({d}, {d})")
    var = g(f"ReduceMean({sq}, axes=[-1], keepdims=true)")
    eps = g(f"Constant(value={EPS}) : Float32 scalar")
    std = g(f"Sqrt({g(f'Add({var}, {eps})')})")
    n = g(f"Div({d}, {std})")
    return g(f"Add({g(f'Mul({n}, {scale})')}, {bias})")


def gpt_text(B: int, T: int, C: int, H: int, M: int, V: int, gather: bool, ln: bool) -> tuple[str, dict[str, str]]:
    """The forward graph's text and the value name of each input label."""
    D = C // H
    g = _Lines()
    f32 = lambda *shape: f"Float32 [{', '.join(map(str, shape))}]"  # noqa: E731
    if gather:
        g.input("ids", f"Int64 [{B}, {T}]")
    else:
        g.input("tok", f32(B, T, C))
    g.input("labels", f"Int64 [{B * T}]")
    g.input("mask", f32(T, T))
    shapes = {"wte": (V, C), "wpe": (T, C), "wq": (C, C), "wk": (C, C), "wv": (C, C), "wo": (C, C),
              "w1": (C, M), "b1": (M,), "w2": (M, C)}
    p = {k: g.input(k, f32(*shapes.get(k, (C,)))) for k in PARAMS}
    tok = g(f"Gather({p['wte']}, {g.name['ids']}, axis=0)") if gather else g.name["tok"]
    x = g(f"Add({tok}, {p['wpe']})")
    # attention
    h = _layer_norm(g, x, p["ln1_g"], p["ln1_b"], ln)

    def linear(x: str, w: str, b: str) -> str:
        return g(f"Add({g(f'MatMul({x}, {p[w]})')}, {p[b]})")

    def heads(w: str, b: str) -> str:
        y = g(f"Reshape({linear(h, w, b)}, shape=[{B}, {T}, {H}, {D}])")
        return g(f"Transpose({y}, perm=[0, 2, 1, 3])")  # [B, H, T, D]
    q, k, v = heads("wq", "bq"), heads("wk", "bk"), heads("wv", "bv")
    kt = g(f"Transpose({k}, perm=[0, 1, 3, 2])")
    scale = g(f"Constant(value={1 / math.sqrt(D)!r}) : Float32 scalar")
    s = g(f"Mul({g(f'MatMul({q}, {kt})')}, {scale})")
    s = g(f"Add({s}, {g.name['mask']})")
    a = g(f"MatMul({g(f'Softmax({s}, axis=-1)')}, {v})")  # [B, H, T, D]
    a = g(f"Reshape({g(f'Transpose({a}, perm=[0, 2, 1, 3])')}, shape=[{B}, {T}, {C}])")
    x = g(f"Add({x}, {linear(a, 'wo', 'bo')})")
    # MLP
    h = _layer_norm(g, x, p["ln2_g"], p["ln2_b"], ln)
    f = g(f"Gelu({linear(h, 'w1', 'b1')})")
    x = g(f"Add({x}, {linear(f, 'w2', 'b2')})")
    # tied projection, cross-entropy
    h = _layer_norm(g, x, p["lnf_g"], p["lnf_b"], ln)
    wte_t = g(f"Transpose({p['wte']}, perm=[1, 0])")
    logits = g(f"MatMul({h}, {wte_t})")
    logits = g(f"Reshape({logits}, shape=[{B * T}, {V}])")
    loss = g(f"SoftmaxCrossEntropyLoss({logits}, {g.name['labels']}, reduction=\"mean\")", 2)[0]
    return "\n".join(g.inputs + g.body + [f"output {loss}"]) + "\n", g.name


def gpt(scale: str, seed: int = 0, gather: Optional[bool] = None, layer_norm: Optional[bool] = None) -> Case:
    B, T, C, H, M, V = GPT_SIZES[scale]
    D = C // H
    real = registered("Gather") if gather is None else gather  # the embedding is gathered
    ln = registered("LayerNormalization") if layer_norm is None else layer_norm
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V, (B, T))
    labels = rng.integers(0, V, B * T)
    mask = np.triu(np.full((T, T), -np.inf, F32), 1)
    vals: dict[str, np.ndarray] = {"ids": ids.astype(np.int64), "labels": labels.astype(np.int64), "mask": mask}
    for k in PARAMS:
        if k.endswith("_g"):
            vals[k] = (1 + _normal(rng, (C,), 0.1)).astype(F32)
        elif k.endswith("_b") or k in ("bq", "bk", "bv", "bo", "b2"):
            vals[k] = _normal(rng, (C,), 0.02)
        elif k == "b1":
            vals[k] = _normal(rng, (M,), 0.02)
        elif k in ("wte", "wpe"):
            vals[k] = _normal(rng, (V, C) if k == "wte" else (T, C), 0.5)
        else:
            fan_in = M if k == "w2" else C
            vals[k] = _normal(rng, (fan_in, C if k != "w1" else M), 1 / np.sqrt(fan_in))
    if not real:
        vals["tok"] = vals["wte"][ids]
    text, name = gpt_text(B, T, C, H, M, V, real, ln)
    order = (["ids"] if real else ["tok"]) + ["labels", "mask"] + list(PARAMS)
    inputs = {name[k]: vals[k] for k in order}
    # the key bias's gradient is 0 (a softmax does not see a shift of its row), all rounding noise
    wrt_labels = ([] if real else ["tok"]) + [k for k in PARAMS if k != "bk"]
    wrt = [name[k] for k in wrt_labels]

    def torch_side(torch: Any, x: dict) -> tuple:
        F = torch.nn.functional
        leaves = [torch.from_numpy(vals[k]).clone().requires_grad_(True) for k in wrt_labels]
        ids_t, labels_t, bk = (torch.from_numpy(vals[k]) for k in ("ids", "labels", "bk"))

        def fn(*args: Any) -> tuple:
            a = dict(zip(wrt_labels, args), bk=bk)
            tok = a["tok"] if not real else F.embedding(ids_t, a["wte"])
            x = tok + a["wpe"]
            h = F.layer_norm(x, (C,), a["ln1_g"], a["ln1_b"], EPS)

            def heads(w: str, b: str) -> Any:
                return (h @ a[w] + a[b]).view(B, T, H, D).transpose(1, 2)
            y = F.scaled_dot_product_attention(heads("wq", "bq"), heads("wk", "bk"), heads("wv", "bv"),
                                               is_causal=True)
            x = x + y.transpose(1, 2).reshape(B, T, C) @ a["wo"] + a["bo"]
            h = F.layer_norm(x, (C,), a["ln2_g"], a["ln2_b"], EPS)
            x = x + F.gelu(h @ a["w1"] + a["b1"]) @ a["w2"] + a["b2"]
            h = F.layer_norm(x, (C,), a["lnf_g"], a["lnf_b"], EPS)
            return (F.cross_entropy((h @ a["wte"].t()).view(B * T, V), labels_t),)
        return fn, leaves, leaves, list

    def jax_side(jax: Any) -> Callable:
        jnp = jax.numpy
        names = wrt_labels + [k for k in order if k not in wrt_labels]

        def norm(x: Any, gam: Any, bet: Any) -> Any:
            m = x.mean(-1, keepdims=True)
            d = x - m
            return d * jax.lax.rsqrt((d * d).mean(-1, keepdims=True) + EPS) * gam + bet

        def f(*args: Any) -> tuple:
            a = dict(zip(names, args))
            tok = a["tok"] if not real else a["wte"][a["ids"]]
            x = tok + a["wpe"]
            h = norm(x, a["ln1_g"], a["ln1_b"])

            def heads(w: str, b: str) -> Any:
                return (h @ a[w] + a[b]).reshape(B, T, H, D).transpose(0, 2, 1, 3)
            q, k, v = heads("wq", "bq"), heads("wk", "bk"), heads("wv", "bv")
            s = q @ k.transpose(0, 1, 3, 2) * F32(1 / math.sqrt(D)) + a["mask"]
            y = jax.nn.softmax(s, axis=-1) @ v
            x = x + y.transpose(0, 2, 1, 3).reshape(B, T, C) @ a["wo"] + a["bo"]
            h = norm(x, a["ln2_g"], a["ln2_b"])
            x = x + jax.nn.gelu(h @ a["w1"] + a["b1"], approximate=False) @ a["w2"] + a["b2"]
            h = norm(x, a["lnf_g"], a["lnf_b"])
            lp = jax.nn.log_softmax((h @ a["wte"].T).reshape(B * T, V), axis=-1)
            return (-jnp.take_along_axis(lp, a["labels"][:, None], axis=1).mean(),)
        return f

    graph = ort_graph(scale)
    onnx_graph = None
    if real and ln and graph is not None:  # the ORT graph is of the Gather and LayerNormalization form
        onnx_graph = (graph, {k: name[k] for k in ["ids", "labels"] + list(PARAMS)})
    form = ", ".join(["Gather" if real else "embeddings as an input (no Gather yet)",
                      "LayerNormalization" if ln else "LayerNorm from ReduceMean etc. (no LayerNormalization yet)"])
    return Case("gpt", f"GPT block: B={B}, T={T}, C={C}, {H} heads, MLP {M}, vocabulary {V}; causal attention, "
                       f"tied projection, mean cross-entropy ({form})",
                text, wrt, wrt_labels, inputs, [np.array(1.0, F32)], torch_side, jax_side,
                ["PyTorch: F.scaled_dot_product_attention(is_causal=True), F.layer_norm, F.cross_entropy; "
                 "JAX: the same formulas, softmax of the masked product",
                 "the key bias bk is an input, not differentiated: its gradient is 0 (rounding noise)"],
                onnx_graph)


def ort_graph(scale: str) -> Optional[str]:
    """ONNX Runtime's training graph of this function at ``scale`` (``data/gpt_ort_<scale>.onnx``, written by
    ``scripts/ort_fixtures/gpt_bench_graph.py``: form b, the parameters and ``bk`` are inputs, its outputs the
    loss and ``<param>_grad``), or None where the file is missing."""
    path = os.path.join(DATA, f"gpt_ort_{scale}.onnx")
    return path if os.path.exists(path) else None
