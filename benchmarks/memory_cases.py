"""The graphs of ``bench_memory.py`` (issue #33 [remat], "How it will be judged"): a stack of MLP blocks and
the LSTM language model, each as gradir text (the forward graph; ``gradir.grad`` derives the training
graph), its inputs, and (the stack) the same function for PyTorch.

The inputs are made in the process that runs the graph (the benchmark measures each configuration's
resident memory in its own process), straight in float32: no float64 temporaries that would raise the
process's peak.  Neither gradir nor torch is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

F32 = np.float32
EPS = 1e-5

# rows (B*T), width C, layers; the hidden width is 4C
STACK_SIZES = {"full": (4096, 512, 6), "quick": (1024, 128, 6), "tiny": (6, 4, 2)}
# S, B, I, H, classes (the judged case: sequence 2,048, batch 32, input and hidden 512, 256 classes)
LSTM_SIZES = {"full": (2048, 32, 512, 512, 256), "quick": (256, 8, 32, 32, 16), "tiny": (3, 2, 4, 5, 6)}
BLOCK_PARAMS = ("ln_g", "ln_b", "w1", "b1", "w2", "b2")


@dataclass
class MemCase:
    key: str
    title: str
    text: str                               # the forward graph (a scalar loss), gradir IR
    wrt: list[str]                          # the inputs differentiated, in the gradient outputs' order
    wrt_labels: list[str]
    make_inputs: Callable[[], dict]         # every forward input by value name, float32 / int64
    torch: Any = None                       # (torch, inputs, mode) -> step(): the gradients (stack only)


def _f32(shape: tuple) -> str:
    return f"Float32 [{', '.join(map(str, shape))}]"


def stack(N: int, C: int, L: int, seed: int = 0) -> MemCase:
    """``L`` pre-LayerNorm MLP blocks on ``N`` rows of width ``C``: ``x + Linear(Gelu(Linear(LN(x))))`` with
    ``Linear`` C -> 4C and 4C -> C (biases), then the loss ``mean(x * x)``; gradients of every block's six
    parameters (the input rows are data)."""
    M = 4 * C
    shapes = {"ln_g": (C,), "ln_b": (C,), "w1": (C, M), "b1": (M,), "w2": (M, C), "b2": (C,)}
    lines = [f"input t0 : {_f32((N, C))}"]
    names: dict[str, str] = {}
    n = 1
    for layer in range(L):
        for k in BLOCK_PARAMS:
            names[f"{k}.{layer}"] = f"t{n}"
            lines.append(f"input t{n} : {_f32(shapes[k])}")
            n += 1
    x = "t0"
    for layer in range(L):
        p = {k: names[f"{k}.{layer}"] for k in BLOCK_PARAMS}
        h = f"t{n}"
        lines.append(f"t{n}, t{n + 1}, t{n + 2} = LayerNormalization({x}, {p['ln_g']}, {p['ln_b']}, axis=-1, "
                     f"epsilon={EPS})")
        n += 3
        prev = h
        for fmt in ("MatMul({}, {w1})", "Add({}, {b1})", "Gelu({})", "MatMul({}, {w2})", "Add({}, {b2})",
                    "Add({x}, {})"):
            lines.append(f"t{n} = " + fmt.format(prev, x=x, **{k: p[k] for k in ("w1", "b1", "w2", "b2")}))
            prev = f"t{n}"
            n += 1
        x = f"t{n - 1}"
    lines += [f"t{n} = Mul({x}, {x})", f"t{n + 1} = ReduceMean(t{n})", f"output t{n + 1}"]
    labels = [f"{k}.{layer}" for layer in range(L) for k in BLOCK_PARAMS]

    def make_inputs() -> dict:
        rng = np.random.default_rng(seed)
        vals = {"t0": rng.standard_normal((N, C), dtype=F32)}
        for label in labels:
            k = label.split(".")[0]
            shape = shapes[k]
            if k == "ln_g":
                a = 1 + 0.1 * rng.standard_normal(shape, dtype=F32)
            elif k in ("ln_b", "b1", "b2"):
                a = 0.02 * rng.standard_normal(shape, dtype=F32)
            else:
                a = rng.standard_normal(shape, dtype=F32) / F32(np.sqrt(shape[0])) * F32(0.5)
            vals[names[label]] = a.astype(F32)
        return vals

    def torch_side(torch: Any, vals: dict, mode: str) -> Callable[[], list]:
        """A step of ``mode``: "eager", "checkpoint" (``torch.utils.checkpoint`` per block, non-reentrant) or
        "compile" (``torch.compile`` of the whole loss; the caller sets ``activation_memory_budget``)."""
        F = torch.nn.functional
        leaves = [torch.from_numpy(vals[names[label]]).clone().requires_grad_(True) for label in labels]
        x0 = torch.from_numpy(vals["t0"])

        def block(x: Any, g: Any, b: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
            h = F.layer_norm(x, (C,), g, b, EPS)
            return x + (F.gelu(h @ w1 + b1) @ w2 + b2)

        def loss(x: Any, *params: Any) -> Any:
            for layer in range(L):
                p = params[6 * layer: 6 * layer + 6]
                if mode == "checkpoint":
                    x = torch.utils.checkpoint.checkpoint(block, x, *p, use_reentrant=False)
                else:
                    x = block(x, *p)
            return (x * x).mean()

        fn = torch.compile(loss) if mode == "compile" else loss

        def step() -> list:
            return list(torch.autograd.grad(fn(x0, *leaves), leaves))
        return step

    return MemCase("stack", f"{L} pre-LayerNorm MLP blocks: {N} rows, {C} -> {M} (Gelu) -> {C}, residual; "
                            "loss mean(x*x)", "\n".join(lines) + "\n", [names[k] for k in labels], labels,
                   make_inputs, torch_side)


def lstm_lm(S: int, B: int, I: int, H: int, C: int, with_dx: bool = False, seed: int = 0) -> MemCase:
    """The judged LSTM language model: ``LSTMTraining`` (hidden ``H``) on X [S, B, I], ``MatMul`` to ``C``
    classes, and the mean cross-entropy of integer targets [S*B] (ONNX's ``SoftmaxCrossEntropyLoss``, the loss
    ORT's training artifacts use: log-softmax and the mean negative log-likelihood in one op); gradients of W,
    R, B, W_out (and X with ``with_dx``)."""
    lines = [f"input t0 : {_f32((S, B, I))}", f"input t1 : {_f32((1, 4 * H, I))}",
             f"input t2 : {_f32((1, 4 * H, H))}", f"input t3 : {_f32((1, 8 * H))}", f"input t4 : {_f32((H, C))}",
             f"input t5 : Int64 [{S * B}]",
             f"t6, t7, t8, t9, t10 = LSTMTraining(t0, t1, t2, t3, hidden_size={H})",
             "t11 = MatMul(t6, t4)",                                   # [S, 1, B, C]
             f"t12 = Reshape(t11, shape=[{S * B}, {C}])",
             "t13, t14 = SoftmaxCrossEntropyLoss(t12, t5)",            # mean; t14 the log-probabilities
             "output t13"]
    wrt = (["t0"] if with_dx else []) + ["t1", "t2", "t3", "t4"]
    labels = (["X"] if with_dx else []) + ["W", "R", "B", "W_out"]

    def make_inputs() -> dict:
        rng = np.random.default_rng(seed)
        u = F32(1.0 / np.sqrt(H))
        return {"t0": rng.standard_normal((S, B, I), dtype=F32),
                "t1": ((rng.random((1, 4 * H, I), dtype=F32) * 2 - 1) * u).astype(F32),
                "t2": ((rng.random((1, 4 * H, H), dtype=F32) * 2 - 1) * u).astype(F32),
                "t3": ((rng.random((1, 8 * H), dtype=F32) * 2 - 1) * u).astype(F32),
                "t4": (rng.standard_normal((H, C), dtype=F32) * u).astype(F32),
                "t5": rng.integers(0, C, (S * B,), dtype=np.int64)}

    dx = "with dX" if with_dx else "without dX"
    return MemCase("lstm", f"LSTM LM: X [{S}, {B}, {I}], LSTMTraining hidden {H}, MatMul to {C} classes, mean "
                           f"cross-entropy (SoftmaxCrossEntropyLoss) of int targets; gradients of "
                           f"{', '.join(labels)} ({dx})",
                   "\n".join(lines) + "\n", wrt, labels, make_inputs)


def build(key: str, scale: str, with_dx: bool = False, seq: int | None = None) -> MemCase:
    """The case ``key`` ("stack" or "lstm") at ``scale``; ``seq`` replaces the LSTM's sequence length (the
    runtime's own memory is measured on the same graph at sequence 2)."""
    if key == "stack":
        return stack(*STACK_SIZES[scale])
    S, B, I, H, C = LSTM_SIZES[scale]
    return lstm_lm(seq or S, B, I, H, C, with_dx)
