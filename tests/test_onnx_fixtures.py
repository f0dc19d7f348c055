"""The ONNX Runtime reference fixtures in tests/data/onnx/ are consistent.

They are written by scripts/ort_fixtures/generate.py in a separate venv (ORT's
training build); the suite only reads them. These tests check the manifest against
the files, the npz files against the graphs' interfaces, and a few references
against numpy, so that the importer's tests can trust them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parent / "data" / "onnx"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
ENTRIES = MANIFEST["entries"]
CASES = sorted({e["case"] for e in ENTRIES})
FORMS = ("a", "b", "forward")


def _entry(case: str, form: str) -> dict:
    (found,) = [e for e in ENTRIES if e["case"] == case and e["form"] == form]
    return found


def _load(rel: str) -> dict[str, np.ndarray]:
    with np.load(DATA / rel, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _feeds(entry: dict) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for rel in entry["inputs"]:
        out.update(_load(rel))
    return out


def _onnx():
    import onnx  # in the test extra: a missing onnx fails these tests, it does not skip them

    from gradir.interop.onnx import ort_schemas

    # ORT writes MaxPoolGrad and AveragePoolGrad in the ai.onnx domain: the checker knows them by gradir's schemas
    ort_schemas.register(onnx)
    return onnx


def test_every_case_has_the_three_forms_and_nothing_is_stray() -> None:
    assert len(CASES) >= 30
    for case in CASES:
        assert sorted(e["form"] for e in ENTRIES if e["case"] == case) == sorted(FORMS), case
    # exported: gradir's own exports run by ORT; kernels: ORT's one-node kernel fixtures (tests/test_ort_kernels.py)
    dirs = sorted(p.name for p in DATA.iterdir() if p.is_dir() and p.name not in ("exported", "kernels"))
    assert dirs == CASES


def test_every_listed_file_exists_inside_the_fixture_directory() -> None:
    for e in ENTRIES:
        for rel in [e["model"], e["reference"], *e["inputs"]]:
            path = (DATA / rel).resolve()
            assert path.is_file(), rel
            assert DATA.resolve() in path.parents, rel


def test_every_npz_loads_without_pickle_and_holds_finite_float32_or_int64() -> None:
    npzs = sorted(p for p in DATA.glob("*/*.npz") if p.parent.name not in ("exported", "kernels"))
    with_masks = {e["case"] for e in ENTRIES if "masks" in e}
    assert len(npzs) == 3 * len(CASES) + len(with_masks)
    for path in npzs:
        arrays = _load(str(path.relative_to(DATA)))
        assert arrays, path
        for key, arr in arrays.items():
            if path.name == "masks.npz":  # ORT's Dropout masks
                assert path.parent.name in with_masks and arr.dtype == np.bool_, (path, key, arr.dtype)
                continue
            assert arr.dtype in (np.float32, np.int64), (path, key, arr.dtype)
            assert np.all(np.isfinite(arr)), (path, key)


def test_every_case_with_dropout_has_ort_masks_keyed_by_the_mask_outputs() -> None:
    onnx = _onnx()
    for case in CASES:
        e = _entry(case, "b")
        drops = [n for n in onnx.load(str(DATA / e["model"])).graph.node if n.op_type == "Dropout"]
        if not drops:
            assert "masks" not in e, case
            continue
        assert all(any(a.name == "seed" for a in n.attribute) for n in drops), f"{case}: an unseeded Dropout"
        assert all(_entry(case, f).get("masks") == f"{case}/masks.npz" for f in FORMS), case
        masks = _load(e["masks"])
        assert sorted(masks) == sorted(n.output[1] for n in drops), case


@pytest.mark.parametrize("case", CASES)
def test_inputs_params_and_reference_are_keyed_by_onnx_names(case: str) -> None:
    e = _entry(case, "a")
    inputs, params, ref = (_load(f"{case}/{n}.npz") for n in ("inputs", "params", "reference"))
    assert sorted(inputs) == sorted(e["user_inputs"])
    assert sorted(params) == sorted(e["params"] + e["frozen"])
    assert sorted(ref) == sorted([e["loss"]] + [f"{p}_grad" for p in e["params"]])
    assert ref[e["loss"]].shape == () and ref[e["loss"]].dtype == np.float32
    for p in e["params"]:
        assert ref[f"{p}_grad"].shape == params[p].shape, p
        assert np.any(ref[f"{p}_grad"] != 0), f"{case}: {p}_grad is all zeros"
    assert e["b_max_rel_diff"] == 0.0  # forms a and b gave bitwise the same numbers
    for form in FORMS:
        assert _entry(case, form)["reference"] == e["reference"]


def test_the_fixture_set_stays_small() -> None:
    total = sum(p.stat().st_size for p in DATA.rglob("*")
                if p.is_file() and "exported" not in p.parts and "kernels" not in p.parts)
    assert total < 2.5 * 1024 * 1024, total  # 2 MB until issue #32's 19 GRU and CNN cases (0.6 MB)
    kernels = sum(p.stat().st_size for p in (DATA / "kernels").rglob("*") if p.is_file())
    assert kernels < 1024 * 1024, kernels
    exported = sum(p.stat().st_size for p in (DATA / "exported").rglob("*") if p.is_file())
    assert exported < 1.5 * 1024 * 1024, exported


def test_the_readme_says_how_and_names_every_case() -> None:
    text = (DATA / "README.md").read_text()
    assert "scripts/ort_fixtures/generate.py" in text and "setup_venv.sh" in text
    for case in CASES:
        assert f"`{case}`" in text, case


def test_models_load_pass_the_checker_and_match_their_manifest_entry() -> None:
    onnx = _onnx()
    for e in ENTRIES:
        model = onnx.load(str(DATA / e["model"]))
        onnx.checker.check_model(model)
        assert model.ir_version <= 10, e["model"]  # what ORT 1.19.2 reads
        ops = sorted({f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in model.graph.node})
        assert ops == e["op_types"], e["model"]
        assert e["opset"] == [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")][0]


def _value_infos(graph) -> dict[str, tuple[int, list]]:
    """Each graph input's dtype and shape; a symbolic dimension (torch_cnn1d's batch) is None."""
    return {v.name: (v.type.tensor_type.elem_type, [d.dim_value if d.HasField("dim_value") else None
                                                    for d in v.type.tensor_type.shape.dim])
            for v in graph.input}


@pytest.mark.parametrize("case", CASES)
def test_graph_interfaces_match_the_npz_files(case: str) -> None:
    onnx = _onnx()
    from onnx import helper

    for form in FORMS:
        e = _entry(case, form)
        graph = onnx.load(str(DATA / e["model"])).graph
        feeds = _feeds(e)
        inputs = _value_infos(graph)
        outputs = [o.name for o in graph.output]
        grads = [f"{p}_grad" for p in e["params"]]
        if form == "forward":
            assert sorted(inputs) == sorted(e["user_inputs"])
            assert outputs == [e["loss"]]
            assert set(e["params"] + e["frozen"]) <= {t.name for t in graph.initializer}
        elif form == "b":
            assert sorted(inputs) == sorted(e["user_inputs"] + e["params"] + e["frozen"])
            assert outputs == [e["loss"], *grads]
        else:
            extra = [f"{g}.accumulation.buffer" for g in grads] + ["lazy_reset_grad"]
            assert sorted(inputs) == sorted(e["user_inputs"] + e["params"] + e["frozen"] + extra)
            assert outputs == [e["loss"]] + [f"{g}.accumulation.out" for g in grads]
            acc = [n for n in graph.node if n.op_type == "InPlaceAccumulatorV2"]
            assert sorted(n.input[1] for n in acc) == sorted(grads)
        for name, arr in feeds.items():
            dtype, shape = inputs[name]
            assert helper.tensor_dtype_to_np_dtype(dtype) == arr.dtype, (case, form, name)
            assert len(shape) == arr.ndim and all(d in (None, n) for d, n in zip(shape, arr.shape)), (case, form, name)


# --- a few references recomputed in numpy (float64), so the harness is checked too ---


def test_mlp_relu_mse_reference_matches_numpy() -> None:
    i, p, r = (_load(f"mlp_relu/{n}.npz") for n in ("inputs", "params", "reference"))
    p = {k: v.astype(np.float64) for k, v in p.items()}
    x, t = i["X"].astype(np.float64), i["target"].astype(np.float64)
    h = x @ p["W1"] + p["B1"]
    a = np.maximum(h, 0)
    o = a @ p["W2"] + p["B2"]
    loss = np.mean((o - t) ** 2)
    do = 2 * (o - t) / o.size
    da = do @ p["W2"].T
    dh = da * (h > 0)
    want = {"onnx::reducemean_output::6": loss, "W2_grad": a.T @ do, "B2_grad": do.sum(0),
            "W1_grad": x.T @ dh, "B1_grad": dh.sum(0)}
    assert sorted(want) == sorted(r)
    for k, v in want.items():
        np.testing.assert_allclose(r[k], v, rtol=1e-5, atol=1e-7, err_msg=k)


def _log_softmax(z, axis):
    z = z - z.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("case,ignore,reduction", [("mlp_relu_ce_mean_ignore", 2, "mean"),
                                                     ("mlp_relu_ce_sum", None, "sum")])
def test_cross_entropy_references_match_numpy(case: str, ignore, reduction: str) -> None:
    i, p, r = (_load(f"{case}/{n}.npz") for n in ("inputs", "params", "reference"))
    p = {k: v.astype(np.float64) for k, v in p.items()}
    x, labels = i["X"].astype(np.float64), i["labels"]
    h = x @ p["W1"] + p["B1"]
    a = np.maximum(h, 0)
    o = a @ p["W2"] + p["B2"]
    lp = _log_softmax(o, 1)
    keep = labels != ignore if ignore is not None else np.ones(len(labels), bool)
    assert 0 < keep.sum() < len(labels) or ignore is None
    rows = np.arange(len(labels))[keep]
    total = -lp[rows, labels[keep]].sum()
    denom = keep.sum() if reduction == "mean" else 1.0
    np.testing.assert_allclose(r["onnx::loss::2"], total / denom, rtol=1e-5)
    do = np.exp(lp)
    do[rows, labels[keep]] -= 1
    do[~keep] = 0
    do /= denom
    np.testing.assert_allclose(r["W2_grad"], a.T @ do, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(r["B2_grad"], do.sum(0), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("op", ["softmax", "logsoftmax"])
def test_opset12_axis1_flattens_and_opset13_does_not(op: str) -> None:
    """The opset-12 references use ONNX's pre-13 semantics (a softmax over the flattened
    dims from the axis on), the opset-13 ones a softmax along the axis alone."""
    for opset, flatten in ((12, True), (13, False)):
        case = f"{op}_opset{opset}_axis1"
        i, p, r = (_load(f"{case}/{n}.npz") for n in ("inputs", "params", "reference"))
        z = i["X"].astype(np.float64) @ p["W"].astype(np.float64)  # [2, 3, 4]
        if flatten:
            s = _log_softmax(z.reshape(2, 12), 1).reshape(2, 3, 4)
        else:
            s = _log_softmax(z, 1)
        y = (s if op == "logsoftmax" else np.exp(s)) * p["S"]
        loss = np.mean((y - i["target"]) ** 2)
        np.testing.assert_allclose(r["onnx::reducemean_output::6"], loss, rtol=1e-5, err_msg=case)


def _lstm_case_loss(case: str, values: dict[str, np.ndarray], inputs: dict[str, np.ndarray]) -> float:
    from lstm_reference import lstm_training_ref

    h_all, h_fin, c_fin, _, _ = lstm_training_ref(
        inputs["X"], values["W"], values["R"], values.get("Bias"),
        H0=values.get("h0", inputs.get("h0")), C0=values.get("c0", inputs.get("c0")), hidden_size=4)
    out = h_all if not case.endswith("all_outputs") else h_all.sum(axis=0) + h_fin + 0.5 * c_fin
    return float(np.mean((out - inputs["target"]) ** 2))


@pytest.mark.parametrize("case", ["lstm_nobias_nostate", "lstm_bias_state_input", "lstm_nobias_state_param",
                                  "lstm_bias_state_param_all_outputs"])
def test_lstm_references_match_float64_finite_differences(case: str) -> None:
    """ORT's LSTMGrad numbers (with all 7 LSTM input slots spelled out) are the true
    gradients: central differences of an independent float64 LSTM agree."""
    i, p, r = (_load(f"{case}/{n}.npz") for n in ("inputs", "params", "reference"))
    values = {k: v.astype(np.float64) for k, v in p.items()}
    np.testing.assert_allclose(r["onnx::reducemean_output::6"], _lstm_case_loss(case, values, i), rtol=1e-5)
    eps = 1e-6
    for name in p:
        fd = np.zeros(values[name].size)
        for k in range(fd.size):
            plus, minus = values[name].copy().ravel(), values[name].copy().ravel()
            plus[k] += eps
            minus[k] -= eps
            lp = _lstm_case_loss(case, {**values, name: plus.reshape(values[name].shape)}, i)
            lm = _lstm_case_loss(case, {**values, name: minus.reshape(values[name].shape)}, i)
            fd[k] = (lp - lm) / (2 * eps)
        got = r[f"{name}_grad"].astype(np.float64).ravel()
        np.testing.assert_allclose(got, fd, rtol=1e-4, atol=1e-6 * np.abs(fd).max(), err_msg=f"{case}: {name}")


def test_mlp_bn_dropout_reference_matches_numpy_with_orts_mask() -> None:
    """ORT's numbers with BatchNormalization in training mode (batch statistics, biased variance) and a seeded
    Dropout are reproduced in float64 from masks.npz: the mask is all a test needs of ORT's generator."""
    i, p, r, m = (_load(f"mlp_bn_dropout/{n}.npz") for n in ("inputs", "params", "reference", "masks"))
    p = {k: v.astype(np.float64) for k, v in p.items()}
    ratio, eps = 0.25, 1e-5  # the model's Dropout ratio and BatchNormalization epsilon
    x, labels, mask = i["X"].astype(np.float64), i["labels"], m["dropout0_mask"]
    n_rows = len(labels)
    h = x @ p["W1"]
    std = np.sqrt(h.var(0) + eps)
    xhat = (h - h.mean(0)) / std
    a = np.maximum(xhat * p["bn.weight"] + p["bn.bias"], 0)
    d = a * mask / (1 - ratio)
    o = d @ p["W2"] + p["B2"]
    lp = _log_softmax(o, 1)
    loss = -lp[np.arange(n_rows), labels].mean()
    do = np.exp(lp)
    do[np.arange(n_rows), labels] -= 1
    do /= n_rows
    da = (do @ p["W2"].T) * mask / (1 - ratio) * (a > 0)
    dxhat = da * p["bn.weight"]
    dh = (dxhat - dxhat.mean(0) - xhat * (dxhat * xhat).mean(0)) / std
    want = {"onnx::loss::2": loss, "W2_grad": d.T @ do, "B2_grad": do.sum(0), "bn.weight_grad": (da * xhat).sum(0),
            "bn.bias_grad": da.sum(0), "W1_grad": x.T @ dh}
    assert sorted(want) == sorted(r)
    for k, v in want.items():
        np.testing.assert_allclose(r[k], v, rtol=1e-4, atol=1e-5 * np.abs(v).max(), err_msg=k)


def _gru_classifier_loss(values: dict[str, np.ndarray], inputs: dict[str, np.ndarray], lbr: int) -> float:
    """An independent float64 ONNX GRU (gates z, r, h) -> last state -> Gemm(transB=1) -> mean cross-entropy."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    w, r, b = values["gru.W"][0], values["gru.R"][0], values["gru.B"][0]
    n_h = r.shape[1]
    wb, rb = b[:3 * n_h], b[3 * n_h:]
    h = values.get("gru.h0", inputs.get("gru.h0"))[0].astype(np.float64)
    for x in inputs["X"].astype(np.float64):
        gx, gh = x @ w.T + wb, h @ r.T + rb
        z = sig(gx[:, :n_h] + gh[:, :n_h])
        rr = sig(gx[:, n_h:2 * n_h] + gh[:, n_h:2 * n_h])
        if lbr:
            cand = np.tanh(gx[:, 2 * n_h:] + rr * gh[:, 2 * n_h:])
        else:
            cand = np.tanh(gx[:, 2 * n_h:] + (rr * h) @ r[2 * n_h:].T + rb[2 * n_h:])
        h = (1 - z) * cand + z * h
    logits = h @ values["fc.weight"].T + values["fc.bias"]
    lp = _log_softmax(logits, 1)
    return float(-lp[np.arange(len(lp)), inputs["labels"]].mean())


@pytest.mark.parametrize("case,lbr", [("gru_classifier", 0), ("gru_classifier_lbr1", 1)])
def test_gru_references_match_float64_finite_differences(case: str, lbr: int) -> None:
    """ORT's GRUGrad numbers (all 6 GRU input slots spelled out) are the true gradients: the loss and central
    differences of an independent float64 GRU agree, for linear_before_reset 0 and 1."""
    i, p, r = (_load(f"{case}/{n}.npz") for n in ("inputs", "params", "reference"))
    values = {k: v.astype(np.float64) for k, v in p.items()}
    loss = r["loss"] if "loss" in r else r["onnx::loss::2"]
    np.testing.assert_allclose(loss, _gru_classifier_loss(values, i, lbr), rtol=1e-5)
    eps = 1e-6
    for name in p:
        fd = np.zeros(values[name].size)
        for k in range(fd.size):
            plus, minus = values[name].copy().ravel(), values[name].copy().ravel()
            plus[k] += eps
            minus[k] -= eps
            lp = _gru_classifier_loss({**values, name: plus.reshape(values[name].shape)}, i, lbr)
            lm = _gru_classifier_loss({**values, name: minus.reshape(values[name].shape)}, i, lbr)
            fd[k] = (lp - lm) / (2 * eps)
        got = r[f"{name}_grad"].astype(np.float64).ravel()
        np.testing.assert_allclose(got, fd, rtol=1e-4, atol=1e-5 * np.abs(fd).max(), err_msg=f"{case}: {name}")
