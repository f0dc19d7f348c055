"""ONNX Runtime's CPU kernels as the reference for gradir's ops of the same name (ORT's gradient and
training ops above all): one-node models written by scripts/ort_fixtures/kernel_fixtures.py with
onnxruntime-training 1.19.2 (tests/data/onnx/kernels/<family>/<case>.onnx + .npz), imported by gradir
and run on the same inputs: every output within 1e-5 of ORT's, relative to its largest magnitude,
with ORT's dtype and shape.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import gradir
from gradir.interop.onnx import import_onnx

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "onnx", "kernels")
CASES = sorted(os.path.relpath(p, KERNELS)[:-len(".onnx")]
               for p in glob.glob(os.path.join(KERNELS, "*", "*.onnx")))


def test_there_are_kernel_fixtures() -> None:
    assert CASES, f"no fixtures under {KERNELS}"


@pytest.mark.parametrize("case", CASES)
def test_gradir_matches_ort_kernel(case: str) -> None:
    imported = import_onnx(os.path.join(KERNELS, case + ".onnx"))
    with np.load(os.path.join(KERNELS, case + ".npz"), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    feeds = {k[len("in."):]: v for k, v in arrays.items() if k.startswith("in.")}
    want = {k[len("out."):]: v for k, v in arrays.items() if k.startswith("out.")}
    labels = {i.label for i in imported.graph.inputs}
    got = gradir.compile(imported.graph).run({**{k: v for k, v in feeds.items() if k in labels},
                                             **imported.inputs})
    for name, ref in want.items():
        assert name in got, f"{case}: output {name} missing (gradir gives {sorted(got)})"
        out = np.asarray(got[name])
        assert out.shape == ref.shape, f"{case}: {name} has shape {out.shape}, ORT's {ref.shape}"
        assert out.dtype == ref.dtype, f"{case}: {name} is {out.dtype}, ORT's {ref.dtype}"
        if ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
            assert np.array_equal(out, ref), f"{case}: {name} differs from ORT's"
            continue
        scale = max(float(np.abs(ref).max()), 1e-30) if ref.size else 1.0
        err = float(np.abs(out.astype(np.float64) - ref).max()) if ref.size else 0.0
        assert err <= 1e-5 * scale, f"{case}: {name} max error {err:.3g} > 1e-5 of max |ORT| {scale:.3g}"
