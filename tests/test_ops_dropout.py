"""Dropout and DropoutGrad: the counter-based mask (statistics, bits on any thread and shard count, seeds),
a mask given as an operand, ONNX Runtime's mask reproduced (its own results in tests/data/onnx/kernels/dropout),
the gradient, ONNX import and export."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gradir
from gradir.backends.cpu.kernels import dropout as kernels
from gradir.backends.cpu.kernels import jit, parallel
from gradir.ops.dropout import dropout_mask

from cli_runner import run_cli
from shardcheck import check_placement

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "onnx", "kernels", "dropout")


def graph(shape: str = "[8, 6, 5]", attrs: str = 'ratio=0.3, training_mode=true, seed=11', dtype: str = "Float32") -> str:
    return (f'input t0 "x" : {dtype} {shape}\nt1, t2 = Dropout(t0, {attrs})\nt3 = Tanh(t1)\n'
            f'output t3 "y", t2 "mask"\n')


def draw(x: np.ndarray, **attrs) -> tuple[np.ndarray, np.ndarray]:
    return kernels.dropout(x, **{"ratio": 0.3, "training_mode": True, **attrs})


@pytest.mark.parametrize("generator", ["philox", "ort"])
def test_the_fraction_kept_is_one_minus_ratio_within_five_sigma(generator: str) -> None:
    n, ratio = 100_000, 0.3
    _, mask = draw(np.ones(n, np.float32), ratio=ratio, seed=1234, generator=generator)
    sigma = np.sqrt(ratio * (1 - ratio) / n)
    assert abs(mask.mean() - (1 - ratio)) < 5 * sigma
    # and no pattern along the index: each quarter (Philox's four words) and each half keeps as many
    for part in (mask[0::4], mask[3::4], mask[: n // 2], mask[n // 2:]):
        assert abs(part.mean() - (1 - ratio)) < 5 * np.sqrt(ratio * (1 - ratio) / part.size)


@pytest.mark.parametrize("generator", ["philox", "ort"])
def test_the_kernel_draws_the_reference_mask_on_both_paths(generator: str) -> None:
    x = np.random.default_rng(0).standard_normal((5, 13)).astype(np.float64)
    want = dropout_mask(x.shape, 0.4, -77, generator)
    y, mask = draw(x, ratio=0.4, seed=-77, generator=generator)
    with jit.disabled():
        y2, mask2 = draw(x, ratio=0.4, seed=-77, generator=generator)
    assert np.array_equal(mask, want) and np.array_equal(mask2, want)
    assert y.tobytes() == y2.tobytes()
    np.testing.assert_array_equal(y, np.where(want, x / 0.6, 0.0))


def test_philox_is_random123s_philox4x32_10() -> None:
    """The known-answer vectors of Random123 (kat_vectors)."""
    from gradir.ops.dropout import _philox4x32
    assert _philox4x32([0, 0, 0, 0], [0, 0]) == [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
    assert _philox4x32([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]) == \
        [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
    words = kernels._philox_words(np.array([0], np.uint64), 0, 0)[0]
    assert [int(w) for w in words] == [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]


@pytest.mark.parametrize("generator", ["philox", "ort"])
def test_the_bits_are_the_same_on_one_and_two_threads(generator: str, monkeypatch) -> None:
    monkeypatch.setattr(parallel, "MIN_CHUNK_BYTES", 1 << 10)  # split even this small array
    x = np.random.default_rng(1).standard_normal((64, 257)).astype(np.float32)
    with parallel.cores(1):
        one = draw(x, seed=5, generator=generator)
    with parallel.cores(2):
        two = draw(x, seed=5, generator=generator)
    assert one[0].tobytes() == two[0].tobytes() and np.array_equal(one[1], two[1])


@pytest.mark.parametrize("generator", ["philox", "ort"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_a_sharded_dropout_has_the_unsharded_bits_on_1_2_and_3_shards(generator: str, axis: int) -> None:
    text = graph("[6, 6, 6]", f'ratio=0.3, training_mode=true, seed=11, generator="{generator}"')
    x = np.random.default_rng(2).standard_normal((6, 6, 6)).astype(np.float32)
    want = gradir.compile(text).run({"x": x})
    sharded = gradir.shard(text, {"x": axis})
    assert "gradir.shard_rows" in sharded.text and (axis == 0 or f"shard_axis={axis}" in sharded.text)
    for k in (1, 2, 3):
        got = sharded.run({"x": x}, shards=k)
        assert got["y"].tobytes() == want["y"].tobytes() and np.array_equal(got["mask"], want["mask"]), k


def test_shardcheck_accepts_dropout_on_every_split() -> None:
    x = np.random.default_rng(3).standard_normal((6, 4, 3))
    assert check_placement(gradir.OPS["Dropout"], [x], {"ratio": 0.5, "training_mode": True, "seed": 3},
                           shards=(1, 2, 3), rtol=0.0) > 0


def test_gradir_run_with_shards_gives_the_unsharded_outputs(tmp_path, capsys) -> None:
    src = tmp_path / "d.gir"
    src.write_text(graph())
    x = np.random.default_rng(4).standard_normal((8, 6, 5)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    for k, out in ((None, "one.npz"), (3, "three.npz")):
        args = ["run", src, "--inputs", tmp_path / "in.npz", "-o", tmp_path / out]
        args += ["--shard", "x:1", "--shards", str(k)] if k else []
        rc, _, err = run_cli(args, capsys)
        assert rc == 0, err
    one, three = np.load(tmp_path / "one.npz"), np.load(tmp_path / "three.npz")
    assert one["y"].tobytes() == three["y"].tobytes() and np.array_equal(one["mask"], three["mask"])


def test_shard_files_with_a_drawing_dropout_are_a_clear_error(tmp_path) -> None:
    sharded = gradir.shard(graph(), {"x": 0})
    x = np.ones((8, 6, 5), np.float32)
    for k, part in enumerate(np.array_split(x, 2)):
        np.savez(tmp_path / f"s{k}.npz", x=part)
    with pytest.raises(gradir.ShardError, match="Dropout that draws its mask"):
        sharded.run(files=str(tmp_path / "s*.npz"))


def test_seeds_and_generators_give_other_masks() -> None:
    x = np.ones(4096, np.float32)
    masks = [draw(x, seed=s, generator=g)[1] for g in ("philox", "ort") for s in (0, 1, 2, 2 ** 40)]
    for i in range(len(masks)):
        for j in range(i):
            assert not np.array_equal(masks[i], masks[j]) or (i, j) == (5, 4), (i, j)
    # as libstdc++'s minstd_rand0, which takes a seed 0 as 1: ORT's seed 0 draws its seed 1's mask
    assert np.array_equal(masks[4], masks[5])


def test_a_mask_operand_replaces_the_draw() -> None:
    text = ('input t0 "x" : Float64 [4, 6]\ninput t1 "m" : Bool [4, 6]\n'
            't2, t3 = Dropout(t0, t1, ratio=0.25, training_mode=true)\noutput t2 "y", t3 "mask"\n')
    rng = np.random.default_rng(5)
    x, m = rng.standard_normal((4, 6)), rng.random((4, 6)) < 0.5
    out = gradir.compile(text).run({"x": x, "m": m})
    assert np.array_equal(out["mask"], m)
    np.testing.assert_array_equal(out["y"], np.where(m, x, 0.0) / 0.75)
    # the mask of a seeded run, given back, reproduces that run
    y, mask = draw(x, ratio=0.25, seed=9)
    again = gradir.compile(text).run({"x": x, "m": mask})
    assert again["y"].tobytes() == y.tobytes()


def test_not_training_or_ratio_zero_is_the_identity_with_an_all_true_mask() -> None:
    x = np.random.default_rng(6).standard_normal((3, 4)).astype(np.float32)
    for attrs in ({"training_mode": False}, {"ratio": 0.0}):
        y, mask = draw(x, **attrs)
        assert y.tobytes() == x.tobytes() and mask.all()


def test_dropout_grad_is_mask_times_dy_over_keep_and_a_copy_for_ratio_zero() -> None:
    rng = np.random.default_rng(7)
    dy, m = rng.standard_normal((5, 3)), rng.random((5, 3)) < 0.5
    np.testing.assert_array_equal(kernels.dropout_grad(dy, m, ratio=0.5, training_mode=True), np.where(m, dy, 0) / 0.5)
    assert kernels.dropout_grad(dy, m, ratio=0.0).tobytes() == dy.tobytes()
    # as ORT's kernel, training_mode is not read
    assert kernels.dropout_grad(dy, m, ratio=0.5).tobytes() == kernels.dropout_grad(dy, m, ratio=0.5,
                                                                                     training_mode=True).tobytes()


def test_the_gradient_is_dropout_grad_of_the_mask_and_passes_gradcheck() -> None:
    text = graph("[4, 5]", "ratio=0.4, training_mode=true, seed=3", "Float64").replace(', t2 "mask"', "")
    derived = gradir.grad(text)
    ops = [op for op in derived.graph.ops if op.op_name == "DropoutGrad"] if hasattr(derived, "graph") else \
        [op for op in derived.ops if op.op_name == "DropoutGrad"]
    assert ops and ops[0].attrs["ratio"] == 0.4
    assert gradir.gradcheck(text).ok


def test_a_dropout_that_does_not_train_gets_the_identity_s_gradient() -> None:
    text = graph("[4, 5]", "ratio=0.4, seed=3", "Float64").replace(', t2 "mask"', "")
    derived = gradir.grad(text)
    g = derived.graph if hasattr(derived, "graph") else derived
    assert [op.attrs["ratio"] for op in g.ops if op.op_name == "DropoutGrad"] == [0.0]
    assert gradir.gradcheck(text).ok


@pytest.mark.parametrize("case", sorted(f[:-5] for f in os.listdir(KERNELS) if f.endswith(".onnx")
                                        and f.startswith("dropout_")))
def test_an_imported_ort_dropout_with_a_seed_draws_ort_s_mask_bit_for_bit(case: str) -> None:
    imported = gradir.import_onnx(os.path.join(KERNELS, case + ".onnx"))
    with np.load(os.path.join(KERNELS, case + ".npz")) as z:
        got = gradir.compile(imported.graph).run({"data": z["in.data"], **imported.inputs})
        assert np.array_equal(got["mask"], z["out.mask"])
        assert got["output"].dtype == z["out.output"].dtype
        np.testing.assert_allclose(got["output"], z["out.output"], rtol=1e-6 if "f32" in case else 1e-7)


def test_a_seeded_onnx_dropout_imports_with_ort_s_generator() -> None:
    imported = gradir.import_onnx(os.path.join(KERNELS, "dropout_f32_r01_seed42.onnx"))
    (op,) = [op for op in imported.graph.ops if op.op_name == "Dropout"]
    assert op.attrs["generator"] == "ort" and op.attrs["seed"] == 42 and op.attrs["training_mode"]
    assert abs(op.attrs["ratio"] - 0.1) < 1e-7


def test_a_ratio_not_known_at_import_is_a_located_error(tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    node = helper.make_node("Dropout", ["x", "r"], ["y"], seed=1)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                                        helper.make_tensor_value_info("r", TensorProto.FLOAT, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    path = tmp_path / "d.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(gradir.GradirError, match="ratio .*must be known at import time"):
        gradir.import_onnx(str(path))


def test_export_writes_ort_s_dropout_and_refuses_philox_without_the_custom_domain() -> None:
    pytest.importorskip("onnx")
    ort_text = graph(attrs='ratio=0.3, training_mode=true, seed=11, generator="ort"')
    model = gradir.export_onnx(gradir.parse(ort_text))
    (node,) = [n for n in model.graph.node if n.op_type == "Dropout"]
    assert [a.i for a in node.attribute if a.name == "seed"] == [11]
    with pytest.raises(gradir.GradirError, match="Philox"):
        gradir.export_onnx(gradir.parse(graph()))
    back = gradir.import_onnx(gradir.export_onnx(gradir.parse(graph()), custom_domain=True).SerializeToString())
    x = np.random.default_rng(8).standard_normal((8, 6, 5)).astype(np.float32)
    want = gradir.compile(graph()).run({"x": x})
    got = gradir.compile(back.graph).run({"x": x, **back.inputs})
    assert got["y"].tobytes() == want["y"].tobytes()


def test_a_mask_operand_exports_as_ort_s_dropout_grad() -> None:
    pytest.importorskip("onnx")
    text = ('input t0 "x" : Float32 [4, 6]\ninput t1 "m" : Bool [4, 6]\n'
            't2, t3 = Dropout(t0, t1, ratio=0.25, training_mode=true)\noutput t2 "y", t3 "mask"\n')
    model = gradir.export_onnx(gradir.parse(text))
    assert [n.op_type for n in model.graph.node] == ["DropoutGrad", "Identity"]
    rng = np.random.default_rng(9)
    x, m = rng.standard_normal((4, 6)).astype(np.float32), rng.random((4, 6)) < 0.5
    back = gradir.import_onnx(model.SerializeToString())
    got = gradir.compile(back.graph).run({"x": x, "m": m, **back.inputs})
    assert got["y"].tobytes() == gradir.compile(text).run({"x": x, "m": m})["y"].tobytes()


def test_a_bad_ratio_is_a_located_type_error() -> None:
    with pytest.raises(gradir.GradirError, match=r":2:\d+: error: Dropout: attribute ratio must be in \[0, 1\)"):
        gradir.parse('input t0 : Float32 [3]\nt1, t2 = Dropout(t0, ratio=1.0)\noutput t1\n').validate()


SET_SEED = os.path.join(KERNELS, "set_seed", "two_dropouts_seed123")


def test_dropout_seed_reproduces_ort_after_set_seed() -> None:
    """ORT 1.19.2 ran the model after ``onnxruntime.set_seed(123)``: its two seedless Dropouts drew with 123, 124."""
    imported = gradir.import_onnx(SET_SEED + ".onnx", dropout_seed=123)
    assert [(op.attrs["generator"], op.attrs["seed"]) for op in imported.graph.ops if op.op_name == "Dropout"] == \
        [("ort", 123), ("ort", 124)]
    with np.load(SET_SEED + ".npz") as z:
        got = gradir.compile(imported.graph).run({"x": z["in.x"], **imported.inputs})
        for k in ("mask1", "mask2"):
            assert np.array_equal(got[k], z[f"out.{k}"]), k
        np.testing.assert_allclose(got["y"], z["out.y"], rtol=1e-6)
    # without it, gradir's own Philox mask (seed 0): not ORT's run
    plain = gradir.import_onnx(SET_SEED + ".onnx")
    assert {op.attrs["generator"] for op in plain.graph.ops if op.op_name == "Dropout"} == {"philox"}


def test_gradir_import_dropout_seed(tmp_path, capsys) -> None:
    rc, _, err = run_cli(["import", SET_SEED + ".onnx", "--dropout-seed", "123", "-o", tmp_path / "m.gir"], capsys)
    assert rc == 0, err
    text = (tmp_path / "m.gir").read_text()
    assert 'seed=123, generator="ort"' in text and 'seed=124, generator="ort"' in text


@pytest.mark.parametrize("bad", [True, 1.5, "3", 1 << 64])
def test_a_bad_dropout_seed_is_an_argument_error(bad) -> None:
    with pytest.raises(gradir.ArgumentError, match="dropout_seed must be a 64-bit integer"):
        gradir.import_onnx(SET_SEED + ".onnx", dropout_seed=bad)
