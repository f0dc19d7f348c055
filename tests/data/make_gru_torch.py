"""Regenerate ``gru_torch_<dtype>.onnx`` and ``gru_torch.npz``: PyTorch's ONNX export of ``nn.GRU`` (TorchScript
exporter, opset 17: an ONNX ``GRU`` with ``linear_before_reset=1``, its weights reordered from torch's gates r, z, n
to ONNX's z, r, h as initializers) and torch's forward values and autograd gradients, which
``tests/test_kernels_gru.py`` compares gradir's import with (torch is not a test dependency, so its numbers are
committed).

    python tests/data/make_gru_torch.py      # needs torch (CPU build) and onnx

For each dtype (``float32``, ``float64``) the npz holds ``<dtype>/x`` [S, B, I], ``<dtype>/h0`` [1, B, H], the
upstream gradients ``<dtype>/dy``, ``<dtype>/dhn``, torch's ``<dtype>/y`` [S, B, H] and ``<dtype>/hn``, and the
gradients of ``sum(y·dy) + sum(hn·dhn)``: ``<dtype>/grad_x``, ``grad_h0`` and, in ONNX's layout and gate order,
``grad_W`` [1, 3H, I], ``grad_R`` [1, 3H, H], ``grad_B`` [1, 6H].  Computed in float64 for both models (the
float32 model's weights and inputs are float32 values).  ``gru_torch_bi_<dtype>.onnx`` and ``<dtype>/bi/``: the
same for a bidirectional ``nn.GRU`` (``y``, ``dy`` [S, B, 2H] as torch has them; the gradients [2, ...]).

Under ``<dtype>/packed/`` the same for a bidirectional ``nn.GRU`` run on a packed sequence (per-row lengths
``lengths`` [B], unsorted; ``x`` finite past them), in gradir's layout: ``W`` [2, 3H, I], ``R`` [2, 3H, H],
``B`` [2, 6H] (direction 0 forward, 1 reverse; ONNX gate order), ``h0`` [2, B, H], ``dy`` and ``y``
[S, 2, B, H] (torch's ``[S, B, 2H]`` split by direction; zero past each row's length), ``dhn``/``hn`` [2, B, H],
and the gradients ``grad_x``, ``grad_h0``, ``grad_W``, ``grad_R``, ``grad_B``.  ``<dtype>/packed_rev/`` holds the
gradients of the same run with the forward direction's upstream gradients zero: the reverse layer alone, which
gradir computes with ``direction="reverse"`` and direction 1's weights.
"""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
S, B, I, H = 6, 3, 5, 4


def _onnx_order(m: np.ndarray) -> np.ndarray:
    """torch's gate blocks (r, z, n) in ONNX's order (z, r, h): torch blocks [1, 0, 2]."""
    return np.concatenate([m[k * H:(k + 1) * H] for k in (1, 0, 2)])


def _exported(dtype: str, tdt: torch.dtype, bidirectional: bool) -> dict:
    """Export ``nn.GRU`` (one direction, or both) to ``gru_torch[_bi]_<dtype>.onnx``; its values and float64
    gradients under ``<dtype>/`` (``<dtype>/bi/``)."""
    torch.manual_seed(34 if bidirectional else 32)
    D, tag = (2, "bi_") if bidirectional else (1, "")
    gru = torch.nn.GRU(I, H, bidirectional=bidirectional).to(tdt)
    x, h0 = torch.randn(S, B, I, dtype=tdt), torch.randn(D, B, H, dtype=tdt)
    torch.onnx.export(gru, (x, h0), os.path.join(HERE, f"gru_torch_{tag}{dtype}.onnx"), input_names=["x", "h0"],
                      output_names=["y", "hn"], opset_version=17, dynamo=False)
    ref = gru.to(torch.float64)
    xd, h0d = x.double().clone().requires_grad_(), h0.double().clone().requires_grad_()
    dy, dhn = torch.randn(S, B, D * H, dtype=tdt).double(), torch.randn(D, B, H, dtype=tdt).double()
    y, hn = ref(xd, h0d)
    ((y * dy).sum() + (hn * dhn).sum()).backward()
    g = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    both = lambda name: np.stack([_onnx_order(g[name + s]) for s in ("", "_reverse")[:D]])  # noqa: E731
    p = f"{dtype}/bi/" if bidirectional else f"{dtype}/"
    return {f"{p}x": x.numpy(), f"{p}h0": h0.numpy(), f"{p}dy": dy.numpy().astype(dtype),
            f"{p}dhn": dhn.numpy().astype(dtype), f"{p}y": y.detach().numpy(), f"{p}hn": hn.detach().numpy(),
            f"{p}grad_x": xd.grad.numpy(), f"{p}grad_h0": h0d.grad.numpy(), f"{p}grad_W": both("weight_ih_l0"),
            f"{p}grad_R": both("weight_hh_l0"),
            f"{p}grad_B": np.concatenate([both("bias_ih_l0"), both("bias_hh_l0")], axis=1)}


def main() -> None:
    arrays = {}
    for dtype, tdt in (("float32", torch.float32), ("float64", torch.float64)):
        arrays.update(_exported(dtype, tdt, False))
        arrays.update(_exported(dtype, tdt, True))
        arrays.update(_packed(dtype, tdt))
    with zipfile.ZipFile(os.path.join(HERE, "gru_torch.npz"), "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arrays[key]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())


def _packed(dtype: str, tdt: torch.dtype) -> dict:
    """The bidirectional packed-sequence case (module docstring)."""
    torch.manual_seed(33)
    gru = torch.nn.GRU(I, H, bidirectional=True).to(tdt)
    lengths = torch.tensor([6, 2, 4])
    x, h0 = torch.randn(S, B, I, dtype=tdt), torch.randn(2, B, H, dtype=tdt)
    dy, dhn = torch.randn(S, B, 2 * H, dtype=tdt).double(), torch.randn(2, B, H, dtype=tdt).double()
    ref = gru.to(torch.float64)
    pack = torch.nn.utils.rnn.pack_padded_sequence
    unpack = torch.nn.utils.rnn.pad_packed_sequence
    out = {}
    for key, keep in (("packed", 1.0), ("packed_rev", 0.0)):
        ref.zero_grad()
        xd, h0d = x.double().clone().requires_grad_(), h0.double().clone().requires_grad_()
        y, hn = ref(pack(xd, lengths, enforce_sorted=False), h0d)
        y, _ = unpack(y, total_length=S)
        mask = torch.tensor([keep] * H + [1.0] * H, dtype=torch.float64)
        ((y * dy * mask).sum() + (hn * dhn * torch.tensor([keep, 1.0], dtype=torch.float64)[:, None, None]).sum()
         ).backward()
        g = {n: p.grad.numpy() for n, p in ref.named_parameters()}
        both = lambda name: np.stack([_onnx_order(g[name]), _onnx_order(g[name + "_reverse"])])  # noqa: E731
        prefix = f"{dtype}/{key}/"
        out.update({prefix + "grad_x": xd.grad.numpy(), prefix + "grad_h0": h0d.grad.numpy(),
                    prefix + "grad_W": both("weight_ih_l0"), prefix + "grad_R": both("weight_hh_l0"),
                    prefix + "grad_B": np.concatenate([both("bias_ih_l0"), both("bias_hh_l0")], axis=1)})
        if key == "packed":
            p = {n: q.detach().numpy() for n, q in ref.named_parameters()}
            w = lambda name: np.stack([_onnx_order(p[name]), _onnx_order(p[name + "_reverse"])])  # noqa: E731
            split = lambda a: a.reshape(S, B, 2, H).transpose(0, 2, 1, 3)  # noqa: E731  [S,B,2H] -> [S,2,B,H]
            out.update({prefix + "x": x.numpy(), prefix + "h0": h0.numpy(), prefix + "lengths": lengths.numpy(),
                        prefix + "W": w("weight_ih_l0").astype(dtype), prefix + "R": w("weight_hh_l0").astype(dtype),
                        prefix + "B": np.concatenate([w("bias_ih_l0"), w("bias_hh_l0")], axis=1).astype(dtype),
                        prefix + "dy": split(dy.numpy()).astype(dtype), prefix + "dhn": dhn.numpy().astype(dtype),
                        prefix + "y": split(y.detach().numpy()), prefix + "hn": hn.detach().numpy()})
    return out


if __name__ == "__main__":
    main()
