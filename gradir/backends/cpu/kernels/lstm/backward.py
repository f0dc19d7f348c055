"""LSTMGrad: exact backpropagation through time of LSTMTraining, chunk by chunk (``sweep.py``): its
step loops compiled (``_jit_lstm.py``) or by NumPy's ufuncs (``bptt.py``), then each chunk's rows of
dX and partial products of the weight gradients."""

from __future__ import annotations

from typing import Any

import numpy as np

from .bptt import Grad
from .common import Steps, check_dtype, check_layer_attrs, expect, result, seq_lengths
from .sweep import Sweep, release, visit_chunks, window

__all__ = ["lstm_grad", "release_scratch", "grad_operands"]

# Target size of a piece of da in the NumPy backward (its working set then fits L2; measured best).
_CHUNK_BYTES = 1 << 19


def release_scratch() -> None:
    """Free the LSTMGrad scratch buffers kept by the calling thread (the chunk's ``da`` and the step
    loops' rings; not the products' packing buffers, a fixed 8 MB per thread: ``blocked.goto_buffers``)."""
    release()


def grad_operands(op: str, X: np.ndarray, W: np.ndarray, R: np.ndarray, SL: Any, H0: Any, C0: Any,
                  dHAll: Any, dHFinal: Any, dCFinal: Any, P: Any, out: Any, hidden_size: int, direction: str,
                  activations: Any, clip: Any, input_forget: int,
                  more: tuple = ()) -> tuple[Grad, list[np.ndarray], list[np.ndarray]]:
    """Check a backward's operands and make its results and ``Grad`` (``more``: other named arrays
    to check, ``(name, array, shape)``)."""
    D = check_layer_attrs(op, direction, activations, clip, input_forget)
    dt = check_dtype(op, X, W, R, H0, C0, dHAll, dHFinal, dCFinal, P)
    X, W, R = (np.ascontiguousarray(a) for a in (X, W, R))
    S, nb, I = X.shape
    h = hidden_size
    expect(op, ("W", W, (D, 4 * h, I)), ("R", R, (D, 4 * h, h)), ("H0", H0, (D, nb, h)),
           ("C0", C0, (D, nb, h)), ("dHAll", dHAll, (S, D, nb, h)), ("dHFinal", dHFinal, (D, nb, h)),
           ("dCFinal", dCFinal, (D, nb, h)), ("P", P, (D, 3 * h)), *[(n, a, f(S, D, nb, h)) for n, a, f in more])
    res = [result(out, j, shape, dt) for j, shape in enumerate(
        [(S, nb, I), (D, 4 * h, I), (D, 4 * h, h), (D, 8 * h), (D, nb, h), (D, nb, h), (D, 3 * h)])]
    given = res[:3]
    # dX, dW and dR into C-contiguous arrays, copied into given outputs that are not: the
    # products' fast paths need them, and the bits must not depend on the outputs' strides
    res[:3] = [r if r.flags.c_contiguous and r.flags.aligned else np.empty(r.shape, dt) for r in given]
    dX, dW, dR, dB, dH0, dC0, dP = res
    steps = Steps(seq_lengths(op, SL, S, nb), S, dt)
    k = Grad(S=S, nb=nb, I=I, h=h, D=D, dtype=dt, direction=direction, steps=steps, X=X, W=W, R=R, dX=dX,
             H0=H0, C0=C0, dHAll=dHAll, dHFinal=dHFinal, dCFinal=dCFinal, P=P, dW=dW, dR=dR, dB=dB,
             dH0=dH0, dC0=dC0, dP=dP, chunk_bytes=_CHUNK_BYTES)
    return k, given, res


def finish_results(given: list[np.ndarray], res: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    for g, r in zip(given, res[:3]):
        if g is not r:
            g[...] = r
    return (*given, *res[3:])


def lstm_grad(X: np.ndarray, W: np.ndarray, R: np.ndarray, SL: np.ndarray | None = None,
              H0: np.ndarray | None = None, C0: np.ndarray | None = None,
              HAll: np.ndarray | None = None, CAll: np.ndarray | None = None,
              iofc: np.ndarray | None = None, dHAll: np.ndarray | None = None,
              dHFinal: np.ndarray | None = None, dCFinal: np.ndarray | None = None,
              P: np.ndarray | None = None, *, out: Any = None, hidden_size: int,
              direction: str = "forward", activations: Any = None, clip: float | None = None,
              input_forget: int = 0) -> tuple[np.ndarray, ...]:
    """Exact BPTT of LSTMTraining; returns ``(dX, dW, dR, dB, dH0, dC0, dP)``."""
    for name, v in (("HAll", HAll), ("CAll", CAll), ("iofc", iofc)):
        if v is None:
            raise ValueError(f"LSTMGrad: operand {name} is required")
    k, given, res = grad_operands(
        "LSTMGrad", X, W, R, SL, H0, C0, dHAll, dHFinal, dCFinal, P, out, hidden_size, direction, activations, clip,
        input_forget, more=(("HAll", HAll, lambda S, D, nb, h: (S, D, nb, h)),
                            ("CAll", CAll, lambda S, D, nb, h: (S, D, nb, h)),
                            ("iofc", iofc, lambda S, D, nb, h: (S, D, nb, 4 * h))))
    check_dtype("LSTMGrad", k.X, HAll, CAll, iofc)
    HAll, CAll, iofc = (np.ascontiguousarray(a) for a in (HAll, CAll, iofc))
    # Large problems on the compiled path (B >= common.SPLIT_MIN_ROWS) run as two halves: the batch
    # rows split into two independent step loops, and every big GEMM split into the two halves
    # of its result's rows, with BLAS held to one thread.  The halves run on two threads when
    # the call was given two cores (``parallel.threads_here``); then neither core waits while
    # the other does a step's element-wise work (step loops 29 vs 33 ms with BLAS per step;
    # ~22 ms with the packed-panel kernel, which also does dX, where it beats BLAS).  Every
    # GEMM is single-threaded either way, so the bits do not depend on the threads (OpenBLAS's
    # multi-threaded GEMMs round differently from its single-threaded ones).  Only when BLAS's
    # own threads sleep soon after a call (``parallel.blas_idle_threads_sleep``), or are not
    # used at all (inside a run, which holds BLAS to one thread): OpenBLAS's default 0.1 s of
    # spinning takes a core from the loops (53 vs 31 ms; LSTMGrad after LSTMTraining 139-144
    # ms).  And not where someone holds BLAS to more than one thread: one thread here would be
    # one thread for them too, and change their bits.
    with Sweep(k) as sw:
        for d in range(k.D):
            sw.begin(d)
            for lo, hi in visit_chunks(k.S, sw.T0, sw.rev):
                base, top = window(lo, hi, k.S, sw.rev)
                sw.chunk(lo, hi, iofc[base:top], CAll[base:top], HAll[base:top])
            sw.end(d)
        sw.finish()
    return finish_results(given, res)
