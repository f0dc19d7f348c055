"""GRUCell and its per-input gradients (PyTorch's ``GRUCell``, gate order r, z, n): one step, NumPy's ufuncs and
``blocked.matmul`` (bits independent of the thread count).

    r = σ(gi_r + gh_r),  z = σ(gi_z + gh_z),  n = tanh(gi_n + r ⊙ gh_n),  H' = n + z ⊙ (H - n)

with ``gi = X·W_ihᵀ + B_ih`` and ``gh = H·W_hhᵀ + B_hh``.  The gradient recomputes the step (the cell keeps
nothing), then the gate gradients ``d_gi = (da_r, da_z, da_n)`` and ``d_gh = (da_r, da_z, da_n ⊙ r)``; each
input's gradient is one product with them.
"""

from __future__ import annotations

import numpy as np

from ....ops.gru import GradGRUCellInputOp, GRUCellOp
from . import blocked
from .lstm.common import check_dtype, expect, result
from .registry import kernel

__all__ = ["gru_cell", "grad_gru_cell_input"]


def _sigmoid(a: np.ndarray) -> np.ndarray:
    """σ(a) = ½·tanh(a/2) + ½ in place (no overflow for any a)."""
    a *= 0.5
    np.tanh(a, out=a)
    a *= 0.5
    a += 0.5
    return a


def _check(op: str, X: np.ndarray, H: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray, B_ih: np.ndarray,
           B_hh: np.ndarray, hd: int, dH: np.ndarray | None = None) -> np.dtype:
    dt = check_dtype(op, X, H, W_ih, W_hh, B_ih, B_hh, dH)
    nb, I = X.shape
    expect(op, ("H", H, (nb, hd)), ("W_ih", W_ih, (3 * hd, I)), ("W_hh", W_hh, (3 * hd, hd)),
           ("B_ih", B_ih, (3 * hd,)), ("B_hh", B_hh, (3 * hd,)), ("dH_next", dH, (nb, hd)))
    return dt


def _step(X: np.ndarray, H: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray, B_ih: np.ndarray, B_hh: np.ndarray,
          hd: int) -> tuple[np.ndarray, np.ndarray]:
    """(gates [B, 3Hd]: r, z, n after their activations; gh [B, 3Hd]: H·W_hhᵀ + B_hh)."""
    gi = blocked.matmul(X, W_ih.T)
    gi += B_ih
    gh = blocked.matmul(H, W_hh.T)
    gh += B_hh
    gi[:, :2 * hd] += gh[:, :2 * hd]
    _sigmoid(gi[:, :2 * hd])
    gi[:, 2 * hd:] += gi[:, :hd] * gh[:, 2 * hd:]
    np.tanh(gi[:, 2 * hd:], out=gi[:, 2 * hd:])
    return gi, gh


@kernel(GRUCellOp, blas=True)
def gru_cell(X: np.ndarray, H: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray, B_ih: np.ndarray,
             B_hh: np.ndarray, *, hidden_size: int, out: np.ndarray | None = None) -> np.ndarray:
    """H' of one GRUCell step."""
    dt = _check("GRUCell", X, H, W_ih, W_hh, B_ih, B_hh, hidden_size)
    hd = hidden_size
    g, _ = _step(X, H, W_ih, W_hh, B_ih, B_hh, hd)
    z, n = g[:, hd:2 * hd], g[:, 2 * hd:]
    res = result(None if out is None else (out,), 0, H.shape, dt)
    np.subtract(H, n, out=res)  # H' = n + z ⊙ (H - n)
    res *= z
    res += n
    return res


@kernel(GradGRUCellInputOp, blas=True)
def grad_gru_cell_input(dH_next: np.ndarray, X: np.ndarray, H: np.ndarray, W_ih: np.ndarray, W_hh: np.ndarray,
                        B_ih: np.ndarray, B_hh: np.ndarray, *, input_index: int, hidden_size: int,
                        out: np.ndarray | None = None) -> np.ndarray:
    """Gradient of GRUCell w.r.t. input ``input_index`` (0 X, 1 H, 2 W_ih, 3 W_hh, 4 B_ih, 5 B_hh)."""
    dt = _check("GradGRUCellInput", X, H, W_ih, W_hh, B_ih, B_hh, hidden_size, dH_next)
    if not 0 <= input_index <= 5:
        raise ValueError(f"GradGRUCellInput: input_index must be 0..5, got {input_index}")
    hd = hidden_size
    g, gh = _step(X, H, W_ih, W_hh, B_ih, B_hh, hd)
    r, z, n = g[:, :hd], g[:, hd:2 * hd], g[:, 2 * hd:]
    d_gi = np.empty_like(g)
    da_r, da_z, da_n = d_gi[:, :hd], d_gi[:, hd:2 * hd], d_gi[:, 2 * hd:]
    np.subtract(1, z, out=da_n)  # da_n = dH ⊙ (1-z) ⊙ (1-n²)
    da_n *= dH_next
    da_n *= 1 - n * n
    np.subtract(H, n, out=da_z)  # da_z = dH ⊙ (H-n) ⊙ z(1-z)
    da_z *= dH_next
    da_z *= z * (1 - z)
    np.multiply(da_n, gh[:, 2 * hd:], out=da_r)  # da_r = da_n ⊙ gh_n ⊙ r(1-r)
    da_r *= r * (1 - r)
    if input_index in (0, 2, 4):
        d = d_gi
    else:
        d = d_gi.copy()
        d[:, 2 * hd:] *= r
    shape = [X.shape, H.shape, W_ih.shape, W_hh.shape, B_ih.shape, B_hh.shape][input_index]
    res = result(None if out is None else (out,), 0, shape, dt)
    if input_index == 0:
        blocked.matmul(d, W_ih, out=res)
    elif input_index == 1:
        blocked.matmul(d, W_hh, out=res)
        res += dH_next * z
    elif input_index in (2, 3):
        blocked.matmul(d.T, X if input_index == 2 else H, out=res)
    else:
        res[...] = d.sum(axis=0)
    return res
