"""The whole graphs of ``bench_graphs.py``: each a forward graph in gradir's text, its inputs and
cotangents, and the same function written for PyTorch and for JAX.

A case is built at a *scale*: ``"full"`` (the sizes of issue [fusion]), ``"quick"`` (a smoke run)
or ``"tiny"`` (a few elements per axis, for ``tests/test_bench_graphs.py``).  gradir derives the
backward graph (``gradir.grad``) of ``Case.text`` with respect to ``Case.wrt``; PyTorch and JAX
differentiate the same function with respect to the same values (PyTorch in its own layout where
that differs: ``nn.LSTM``'s gate order, split biases; ``from_torch`` maps its gradients back).

Neither torch nor jax is imported here: the builders receive the module, so that the cases (and
their test) work where they are missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

F32 = np.float32


@dataclass
class Case:
    key: str
    title: str
    text: str                         # the forward graph, gradir IR
    wrt: list[str]                    # inputs to differentiate, in the gradient outputs' order
    wrt_labels: list[str]             # what each is, for the printout
    inputs: dict[str, np.ndarray]     # every forward input, by name
    cotangents: list[np.ndarray]      # one per forward output, in gradir's shapes
    torch: Callable[[Any, dict], tuple]  # (torch, inputs) -> (fn, args, leaves, from_torch)
    jax: Callable[[Any], Callable]    # (jax) -> f(*wrt arrays, *other inputs) -> tuple of outputs
    notes: list[str] = field(default_factory=list)
    # a training graph that gradir imports instead of deriving one (ONNX Runtime's): its path and, for each
    # of its input labels, the name of the case input it reads; its outputs include ``<label>_grad`` for
    # every label of ``wrt_labels``
    onnx_graph: Optional[tuple[str, dict[str, str]]] = None

    @property
    def others(self) -> list[str]:
        """The forward inputs that are not differentiated, in input order."""
        return [k for k in self.inputs if k not in self.wrt]


def _graph(inputs: dict[str, np.ndarray], body: list[str], output: str) -> str:
    lines = [f"input {k} : Float32 [{', '.join(map(str, v.shape))}]" if v.ndim else f"input {k} : Float32 scalar"
             for k, v in inputs.items()]
    return "\n".join(lines + body + [f"output {output}"]) + "\n"


def _normal(rng: np.random.Generator, shape: tuple, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=F32) * F32(scale)).astype(F32)


# ---------------------------------------------------------------------------------------------
# 1. LSTM language model: LSTMTraining -> MatMul to C classes -> LogSoftmax

LSTM_SIZES = {"full": (100, 64, 256, 256, 512), "quick": (20, 16, 64, 64, 128), "tiny": (3, 2, 4, 5, 6)}
_ONNX_TO_TORCH = (0, 2, 3, 1)  # torch gate block k (i, f, g, o) is ONNX block _ONNX_TO_TORCH[k] (i, o, f, c)


def lstm_lm(scale: str, seed: int = 0) -> Case:
    S, B, I, H, C = LSTM_SIZES[scale]
    rng = np.random.default_rng(seed)
    u = 1.0 / np.sqrt(H)  # PyTorch's LSTM initialization, U(+-1/sqrt(H))
    inputs = {"t0": _normal(rng, (S, B, I)),
              "t1": rng.uniform(-u, u, (1, 4 * H, I)).astype(F32),
              "t2": rng.uniform(-u, u, (1, 4 * H, H)).astype(F32),
              "t3": rng.uniform(-u, u, (1, 8 * H)).astype(F32),
              "t4": _normal(rng, (H, C), 1.0 / np.sqrt(H))}
    body = [f"t5, t6, t7, t8, t9 = LSTMTraining(t0, t1, t2, t3, hidden_size={H})",
            "t10 = MatMul(t5, t4)", "t11 = LogSoftmax(t10)"]
    perm = np.concatenate([np.arange(k * H, (k + 1) * H) for k in _ONNX_TO_TORCH])

    def torch_side(torch: Any, x: dict) -> tuple:
        lstm = torch.nn.LSTM(I, H)
        with torch.no_grad():
            lstm.weight_ih_l0.copy_(torch.from_numpy(x["t1"][0][perm]))
            lstm.weight_hh_l0.copy_(torch.from_numpy(x["t2"][0][perm]))
            lstm.bias_ih_l0.copy_(torch.from_numpy(x["t3"][0, :4 * H][perm]))
            lstm.bias_hh_l0.copy_(torch.from_numpy(x["t3"][0, 4 * H:][perm]))
        X = torch.from_numpy(x["t0"]).clone().requires_grad_(True)
        Wout = torch.from_numpy(x["t4"]).clone().requires_grad_(True)

        def fn(X: Any, Wout: Any) -> tuple:
            y, _ = lstm(X)
            return (torch.log_softmax((y @ Wout).unsqueeze(1), dim=-1),)  # [S, 1, B, C], as gradir's

        def from_torch(g: list) -> list:
            def onnx(a: np.ndarray) -> np.ndarray:
                out = np.empty_like(a)
                out[perm] = a
                return out
            dX, dWout, dWih, dWhh, dbih, dbhh = g
            return [dX, onnx(dWih)[None], onnx(dWhh)[None], np.concatenate([onnx(dbih), onnx(dbhh)])[None], dWout]

        leaves = [X, Wout, lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0]
        return fn, [X, Wout], leaves, from_torch

    def jax_side(jax: Any) -> Callable:
        jnp = jax.numpy

        def f(X: Any, W: Any, R: Any, Bias: Any, Wout: Any) -> tuple:
            pre = X @ W[0].T + Bias[0, :4 * H] + Bias[0, 4 * H:]  # [S, B, 4H], gates i, o, f, c

            def step(carry: tuple, p: Any) -> tuple:
                h, c = carry
                g = p + h @ R[0].T
                i, o, fg = (jax.nn.sigmoid(g[:, k * H:(k + 1) * H]) for k in range(3))
                c = fg * c + i * jnp.tanh(g[:, 3 * H:])
                h = o * jnp.tanh(c)
                return (h, c), h

            zero = jnp.zeros((B, H), X.dtype)
            _, hs = jax.lax.scan(step, (zero, zero), pre)
            return (jax.nn.log_softmax((hs @ Wout)[:, None], axis=-1),)
        return f

    return Case("lstm", f"LSTM LM: LSTMTraining (S={S}, B={B}, I={I}, H={H}) -> MatMul to {C} classes -> LogSoftmax",
                _graph(inputs, body, "t11"), ["t0", "t1", "t2", "t3", "t4"], ["X", "W", "R", "B", "W_out"],
                inputs, [_normal(rng, (S, 1, B, C))], torch_side, jax_side,
                ["torch.compile: Dynamo does not trace nn.LSTM (a graph break), so the LSTM runs eagerly and "
                 "inductor compiles the rest"])


# ---------------------------------------------------------------------------------------------
# 2. and 4. GELU MLPs: a LogSoftmax output, or a scalar NLL loss

MLP_SIZES = {"full": (512, 1024, 4096, 1024), "quick": (128, 256, 1024, 256), "tiny": (3, 4, 6, 5)}
LOSS_SIZES = {"full": (512, 1024, 2048, 512), "quick": (128, 256, 512, 128), "tiny": (3, 4, 6, 5)}


def _mlp_inputs(rng: np.random.Generator, N: int, D: int, Fh: int, C: int) -> dict:
    return {"t0": _normal(rng, (N, D)), "t1": _normal(rng, (D, Fh), 1 / np.sqrt(D)), "t2": _normal(rng, (Fh,), 0.1),
            "t3": _normal(rng, (Fh, C), 1 / np.sqrt(Fh)), "t4": _normal(rng, (C,), 0.1)}


_MLP_BODY = ["t5 = MatMul(t0, t1)", "t6 = Add(t5, t2)", "t7 = Gelu(t6)", "t8 = MatMul(t7, t3)", "t9 = Add(t8, t4)",
             "t10 = LogSoftmax(t9)"]


def mlp(scale: str, seed: int = 0) -> Case:
    N, D, Fh, C = MLP_SIZES[scale]
    rng = np.random.default_rng(seed)
    inputs = _mlp_inputs(rng, N, D, Fh, C)

    def torch_side(torch: Any, x: dict) -> tuple:
        args = [torch.from_numpy(x[k]).clone().requires_grad_(True) for k in ("t1", "t2", "t3", "t4")]
        xin = torch.from_numpy(x["t0"])

        def fn(W1: Any, b1: Any, W2: Any, b2: Any) -> tuple:
            h = torch.nn.functional.gelu(xin @ W1 + b1)
            return (torch.log_softmax(h @ W2 + b2, dim=-1),)
        return fn, args, args, list

    def jax_side(jax: Any) -> Callable:
        def f(W1: Any, b1: Any, W2: Any, b2: Any, x: Any) -> tuple:
            h = jax.nn.gelu(x @ W1 + b1, approximate=False)
            return (jax.nn.log_softmax(h @ W2 + b2, axis=-1),)
        return f

    return Case("mlp", f"GELU MLP: {N} rows, {D} -> {Fh} (Gelu) -> {C}, LogSoftmax", _graph(inputs, _MLP_BODY, "t10"),
                ["t1", "t2", "t3", "t4"], ["W1", "b1", "W2", "b2"], inputs, [_normal(rng, (N, C))],
                torch_side, jax_side)


def mlp_loss(scale: str, seed: int = 0) -> Case:
    """The MLP with a scalar loss: mean negative log-likelihood of one-hot labels
    (Mul with the one-hot rows, ReduceSum over classes, ReduceMean, Neg)."""
    N, D, Fh, C = LOSS_SIZES[scale]
    rng = np.random.default_rng(seed)
    inputs = _mlp_inputs(rng, N, D, Fh, C)
    labels = rng.integers(0, C, N)
    inputs["t11"] = np.eye(C, dtype=F32)[labels]
    body = _MLP_BODY + ["t12 = Mul(t10, t11)", "t13 = ReduceSum(t12, axes=[1])", "t14 = ReduceMean(t13)",
                        "t15 = Neg(t14)"]

    def torch_side(torch: Any, x: dict) -> tuple:
        args = [torch.from_numpy(x[k]).clone().requires_grad_(True) for k in ("t1", "t2", "t3", "t4")]
        xin, target = torch.from_numpy(x["t0"]), torch.from_numpy(labels)

        def fn(W1: Any, b1: Any, W2: Any, b2: Any) -> tuple:
            h = torch.nn.functional.gelu(xin @ W1 + b1)
            return (torch.nn.functional.cross_entropy(h @ W2 + b2, target),)
        return fn, args, args, list

    def jax_side(jax: Any) -> Callable:
        def f(W1: Any, b1: Any, W2: Any, b2: Any, x: Any, onehot: Any) -> tuple:
            h = jax.nn.gelu(x @ W1 + b1, approximate=False)
            return (-(jax.nn.log_softmax(h @ W2 + b2, axis=-1) * onehot).sum(axis=1).mean(),)
        return f

    return Case("loss", f"MLP with a scalar loss: {N} rows, {D} -> {Fh} (Gelu) -> {C}, LogSoftmax, mean NLL "
                        "(Mul one-hot, ReduceSum, ReduceMean, Neg)",
                _graph(inputs, body, "t15"), ["t1", "t2", "t3", "t4"], ["W1", "b1", "W2", "b2"], inputs,
                [np.array(1.0, F32)], torch_side, jax_side,
                ["PyTorch and JAX: cross_entropy on integer labels / the same formula on the one-hot rows"])


# ---------------------------------------------------------------------------------------------
# 3. a chain of 8 element-wise ops

CHAIN_SIZES = {"full": (2048, 2048), "quick": (512, 512), "tiny": (3, 4)}
CHAIN_OPS = "Mul(x, y), Tanh, Add(., x), Sigmoid, Mul(., y), Gelu, Sub(., x), Exp"


def chain(scale: str, seed: int = 0) -> Case:
    shape = CHAIN_SIZES[scale]
    rng = np.random.default_rng(seed)
    inputs = {"t0": _normal(rng, shape), "t1": _normal(rng, shape)}
    body = ["t2 = Mul(t0, t1)", "t3 = Tanh(t2)", "t4 = Add(t3, t0)", "t5 = Sigmoid(t4)", "t6 = Mul(t5, t1)",
            "t7 = Gelu(t6)", "t8 = Sub(t7, t0)", "t9 = Exp(t8)"]

    def torch_side(torch: Any, x: dict) -> tuple:
        args = [torch.from_numpy(x[k]).clone().requires_grad_(True) for k in ("t0", "t1")]

        def fn(a: Any, b: Any) -> tuple:
            t = torch.sigmoid(torch.tanh(a * b) + a) * b
            return (torch.exp(torch.nn.functional.gelu(t) - a),)
        return fn, args, args, list

    def jax_side(jax: Any) -> Callable:
        jnp = jax.numpy

        def f(a: Any, b: Any) -> tuple:
            t = jax.nn.sigmoid(jnp.tanh(a * b) + a) * b
            return (jnp.exp(jax.nn.gelu(t, approximate=False) - a),)
        return f

    return Case("chain", f"element-wise chain on {shape[0]} x {shape[1]}: {CHAIN_OPS}", _graph(inputs, body, "t9"),
                ["t0", "t1"], ["x", "y"], inputs, [_normal(rng, shape)], torch_side, jax_side)


# ---------------------------------------------------------------------------------------------
# 5. two independent heavy branches joined at the end

BRANCH_SIZES = {"full": (512, 1024, 2048, 1024), "quick": (128, 256, 512, 256), "tiny": (3, 4, 6, 5)}


def branches(scale: str, seed: int = 0) -> Case:
    N, D, Fh, C = BRANCH_SIZES[scale]
    rng = np.random.default_rng(seed)
    inputs = {"t0": _normal(rng, (N, D)), "t1": _normal(rng, (N, D)),
              "t2": _normal(rng, (D, Fh), 1 / np.sqrt(D)), "t3": _normal(rng, (Fh, C), 1 / np.sqrt(Fh)),
              "t4": _normal(rng, (D, Fh), 1 / np.sqrt(D)), "t5": _normal(rng, (Fh, C), 1 / np.sqrt(Fh))}
    body = ["t6 = MatMul(t0, t2)", "t7 = Gelu(t6)", "t8 = MatMul(t7, t3)",
            "t9 = MatMul(t1, t4)", "t10 = Tanh(t9)", "t11 = MatMul(t10, t5)",
            "t12 = Add(t8, t11)", "t13 = LogSoftmax(t12)"]

    def torch_side(torch: Any, x: dict) -> tuple:
        args = [torch.from_numpy(x[k]).clone().requires_grad_(True) for k in ("t2", "t3", "t4", "t5")]
        xa, xb = torch.from_numpy(x["t0"]), torch.from_numpy(x["t1"])

        def fn(Wa: Any, Va: Any, Wb: Any, Vb: Any) -> tuple:
            y = torch.nn.functional.gelu(xa @ Wa) @ Va + torch.tanh(xb @ Wb) @ Vb
            return (torch.log_softmax(y, dim=-1),)
        return fn, args, args, list

    def jax_side(jax: Any) -> Callable:
        jnp = jax.numpy

        def f(Wa: Any, Va: Any, Wb: Any, Vb: Any, xa: Any, xb: Any) -> tuple:
            y = jax.nn.gelu(xa @ Wa, approximate=False) @ Va + jnp.tanh(xb @ Wb) @ Vb
            return (jax.nn.log_softmax(y, axis=-1),)
        return f

    return Case("branches", f"two independent branches, {N} rows each: Gelu(xa Wa) Va + Tanh(xb Wb) Vb "
                            f"({D} -> {Fh} -> {C}), LogSoftmax",
                _graph(inputs, body, "t13"), ["t2", "t3", "t4", "t5"], ["Wa", "Va", "Wb", "Vb"], inputs,
                [_normal(rng, (N, C))], torch_side, jax_side)


# ---------------------------------------------------------------------------------------------
# 7. GRU language model: GRUTraining (linear_before_reset=1, PyTorch's GRU) -> MatMul to C classes -> LogSoftmax

GRU_SIZES = {"full": (100, 64, 256, 256, 512), "quick": (20, 16, 64, 64, 128), "tiny": (3, 2, 4, 5, 6)}
_GRU_TO_TORCH = (1, 0, 2)  # torch gate block k (r, z, n) is ONNX block _GRU_TO_TORCH[k] (z, r, h)


def gru_lm(scale: str, seed: int = 0) -> Case:
    S, B, I, H, C = GRU_SIZES[scale]
    rng = np.random.default_rng(seed)
    u = 1.0 / np.sqrt(H)  # PyTorch's GRU initialization, U(+-1/sqrt(H))
    inputs = {"t0": _normal(rng, (S, B, I)),
              "t1": rng.uniform(-u, u, (1, 3 * H, I)).astype(F32),
              "t2": rng.uniform(-u, u, (1, 3 * H, H)).astype(F32),
              "t3": rng.uniform(-u, u, (1, 6 * H)).astype(F32),
              "t4": _normal(rng, (H, C), 1.0 / np.sqrt(H))}
    body = [f"t5, t6, t7 = GRUTraining(t0, t1, t2, t3, hidden_size={H}, linear_before_reset=1)",
            "t8 = MatMul(t5, t4)", "t9 = LogSoftmax(t8)"]
    perm = np.concatenate([np.arange(k * H, (k + 1) * H) for k in _GRU_TO_TORCH])

    def torch_side(torch: Any, x: dict) -> tuple:
        gru = torch.nn.GRU(I, H)
        with torch.no_grad():
            gru.weight_ih_l0.copy_(torch.from_numpy(x["t1"][0][perm]))
            gru.weight_hh_l0.copy_(torch.from_numpy(x["t2"][0][perm]))
            gru.bias_ih_l0.copy_(torch.from_numpy(x["t3"][0, :3 * H][perm]))
            gru.bias_hh_l0.copy_(torch.from_numpy(x["t3"][0, 3 * H:][perm]))
        X = torch.from_numpy(x["t0"]).clone().requires_grad_(True)
        Wout = torch.from_numpy(x["t4"]).clone().requires_grad_(True)

        def fn(X: Any, Wout: Any) -> tuple:
            y, _ = gru(X)
            return (torch.log_softmax((y @ Wout).unsqueeze(1), dim=-1),)  # [S, 1, B, C], as gradir's

        def from_torch(g: list) -> list:
            def onnx(a: np.ndarray) -> np.ndarray:
                out = np.empty_like(a)
                out[perm] = a
                return out
            dX, dWout, dWih, dWhh, dbih, dbhh = g
            return [dX, onnx(dWih)[None], onnx(dWhh)[None], np.concatenate([onnx(dbih), onnx(dbhh)])[None], dWout]

        leaves = [X, Wout, gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0]
        return fn, [X, Wout], leaves, from_torch

    def jax_side(jax: Any) -> Callable:
        jnp = jax.numpy

        def f(X: Any, W: Any, R: Any, Bias: Any, Wout: Any) -> tuple:
            pre = X @ W[0].T + Bias[0, :3 * H]  # [S, B, 3H], gates z, r, h

            def step(h: Any, p: Any) -> tuple:
                q = h @ R[0].T + Bias[0, 3 * H:]
                z, r = (jax.nn.sigmoid(p[:, k * H:(k + 1) * H] + q[:, k * H:(k + 1) * H]) for k in range(2))
                n = jnp.tanh(p[:, 2 * H:] + r * q[:, 2 * H:])
                h = n + z * (h - n)
                return h, h

            _, hs = jax.lax.scan(step, jnp.zeros((B, H), X.dtype), pre)
            return (jax.nn.log_softmax((hs @ Wout)[:, None], axis=-1),)
        return f

    return Case("gru", f"GRU LM: GRUTraining (S={S}, B={B}, I={I}, H={H}, linear_before_reset=1) -> MatMul to "
                       f"{C} classes -> LogSoftmax",
                _graph(inputs, body, "t9"), ["t0", "t1", "t2", "t3", "t4"], ["X", "W", "R", "B", "W_out"],
                inputs, [_normal(rng, (S, 1, B, C))], torch_side, jax_side,
                ["torch.compile: Dynamo does not trace nn.GRU (a graph break), so the GRU runs eagerly and "
                 "inductor compiles the rest"])


from gpt_case import GPT_SIZES, gpt  # noqa: E402,F401  (its own module: the 500-line rule)
from cnn_case import CNN_SIZES, DWSEP_SIZES, cnn, dwsep  # noqa: E402,F401  (the same)

BUILDERS: dict[str, Callable[..., Case]] = {"lstm": lstm_lm, "mlp": mlp, "chain": chain, "loss": mlp_loss,
                                             "branches": branches, "gpt": gpt, "gru": gru_lm,
                                             "cnn": cnn, "dwsep": dwsep}


def build(key: str, scale: str, seed: int = 0) -> Case:
    return BUILDERS[key](scale, seed)


def rel_error(ours: np.ndarray, ref: np.ndarray) -> float:
    """max |ours - ref| over max |ref|: a float32 tolerance for whole gradients."""
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    if ours.shape != ref.shape:
        return float("inf")
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    return float(np.abs(ours - ref).max()) / max(scale, 1e-30) if ref.size else 0.0


def torch_gradients(torch: Any, case: Case, fn: Optional[Callable] = None) -> list[np.ndarray]:
    """PyTorch's gradients of ``case`` (eager unless ``fn`` is given), in gradir's layout and wrt order."""
    eager, args, leaves, from_torch = case.torch(torch, case.inputs)
    outs = (fn or eager)(*args)
    cts = [torch.from_numpy(c).reshape(o.shape) for c, o in zip(case.cotangents, outs)]
    grads = torch.autograd.grad(outs, leaves, cts)
    return [np.asarray(g) for g in from_torch([g.detach().numpy() for g in grads])]
