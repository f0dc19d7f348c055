"""Kernel fixtures of the dropout family: ORT's ``DropoutGrad`` (Float32 and Float64; ratios 0, 0.1, 0.5; the
ratio and training_mode inputs as initializers, one case without them: ratio 0.5 by default) and ONNX's
``Dropout`` with a ``seed`` in training mode, whose mask gradir draws bit for bit (``generator="ort"``:
the first run of ORT's session), of several ratios, shapes and seeds; and a Dropout in inference mode."""

from __future__ import annotations

from typing import Any

import numpy as np
from kernel_fixtures import MS_DOMAIN, Case

_rng = np.random.default_rng(31)
_RATIO_T = ("ratio", "training_mode")


def _grad(name: str, dtype: type, ratio: float | None, shape: tuple = (3, 5, 4)) -> Case:
    dy = _rng.standard_normal(shape).astype(dtype)
    mask = _rng.random(shape) >= (ratio or 0.5)
    inputs = {"dY": dy, "mask": mask}
    if ratio is not None:
        inputs.update(ratio=np.array(ratio, np.float32), training_mode=np.array(True))
    return Case(name, "DropoutGrad", MS_DOMAIN, inputs, ["dX"], static=_RATIO_T)


def _dropout(name: str, shape: tuple, ratio: float, seed: int, dtype: type = np.float32,
             training: bool = True) -> Case:
    return Case(name, "Dropout", "", {"data": _rng.standard_normal(shape).astype(dtype),
                                      "ratio": np.array(ratio, np.float32), "training_mode": np.array(training)},
                ["output", "mask"], {"seed": seed}, static=_RATIO_T, opset=17)


CASES = [
    _grad("dropoutgrad_f32_r0", np.float32, 0.0),
    _grad("dropoutgrad_f32_r01", np.float32, 0.1),
    _grad("dropoutgrad_f32_r05", np.float32, 0.5),
    _grad("dropoutgrad_f64_r0", np.float64, 0.0),
    _grad("dropoutgrad_f64_r01", np.float64, 0.1),
    _grad("dropoutgrad_f64_r05", np.float64, 0.5),
    _grad("dropoutgrad_f32_default_ratio", np.float32, None),
    _dropout("dropout_f32_r01_seed42", (4, 16, 32), 0.1, 42),
    _dropout("dropout_f32_r05_seed0", (7, 9), 0.5, 0),
    _dropout("dropout_f32_r03_seed_negative", (1000,), 0.3, -5),
    _dropout("dropout_f32_r09_seed_large", (2, 3, 4, 5), 0.9, 2 ** 40 + 3),
    _dropout("dropout_f64_r025_seed7", (6, 10), 0.25, 7, np.float64),
    _dropout("dropout_f32_inference", (3, 4), 0.5, 1, training=False),
]


def write_set_seed(out: Any) -> None:
    """``set_seed/``: two Dropouts without a seed in a chain, run by ORT after ``onnxruntime.set_seed(123)``
    (a process-wide generator: the k-th to run draws with seed 123 + k), for ``import_onnx(dropout_seed=123)``.
    Not a kernel case (the generic test imports without ``dropout_seed``): one level below the family."""
    import onnxruntime as ort
    from generate import save_npz
    from kernel_fixtures import IR_VERSION
    from onnx import TensorProto, helper, numpy_helper, save

    shape = [6, 9]
    nodes = [helper.make_node("Dropout", ["x", "ratio", "training_mode"], ["h", "mask1"]),
             helper.make_node("Dropout", ["h", "ratio", "training_mode"], ["y", "mask2"])]
    info = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "two_dropouts", [info("x", TensorProto.FLOAT, shape)],
                              [info("y", TensorProto.FLOAT, shape), info("mask1", TensorProto.BOOL, shape),
                               info("mask2", TensorProto.BOOL, shape)],
                              [numpy_helper.from_array(np.array(0.2, np.float32), "ratio"),
                               numpy_helper.from_array(np.array(True), "training_mode")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    ort.set_seed(123)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y, m1, m2 = sess.run(["y", "mask1", "mask2"], {"x": x})
    d = out / "dropout" / "set_seed"
    d.mkdir(parents=True, exist_ok=True)
    save(model, d / "two_dropouts_seed123.onnx")
    save_npz(d / "two_dropouts_seed123.npz", {"in.x": x, "out.y": y, "out.mask1": m1, "out.mask2": m2})


if __name__ == "__main__":  # after kernel_fixtures.py dropout (which empties the family's directory)
    from pathlib import Path
    write_set_seed(Path(__file__).resolve().parent.parent.parent / "tests" / "data" / "onnx" / "kernels")
