"""Kernel fixtures of ops gradir already had before the family files: a smoke set that keeps
tests/test_ort_kernels.py meaningful on its own (SoftmaxGrad_13, ReluGrad)."""

from __future__ import annotations

import numpy as np
from kernel_fixtures import MS_DOMAIN, Case

_rng = np.random.default_rng(31)
_y = _rng.random((2, 3, 4)).astype(np.float32)
_y /= _y.sum(axis=1, keepdims=True)

CASES = [
    Case("softmaxgrad13_axis1", "SoftmaxGrad_13", MS_DOMAIN,
         {"dY": _rng.standard_normal((2, 3, 4)).astype(np.float32), "Y": _y}, ["dX"], {"axis": 1}),
    Case("relugrad", "ReluGrad", MS_DOMAIN,
         {"dY": _rng.standard_normal((3, 5)).astype(np.float32),
          "X": _rng.standard_normal((3, 5)).astype(np.float32)}, ["dX"]),
]
