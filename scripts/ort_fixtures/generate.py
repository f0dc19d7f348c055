"""Generate the ONNX Runtime training reference fixtures in tests/data/onnx/.

Run with the python of the venv that scripts/ort_fixtures/setup_venv.sh makes:

    scripts/ort_fixtures/setup_venv.sh ../venv-ort
    ../venv-ort/bin/python scripts/ort_fixtures/generate.py [-o tests/data/onnx]

For every case of models.py it writes, in OUT/<case>/:

  forward.onnx        the plain forward model with its loss (parameters are
                      initializers): what `gradir import` + `gradir grad` start from
  training_model.onnx form (a): what onnxruntime.training.artifacts.generate_artifacts
                      writes (forward + loss + gradient graph, InPlaceAccumulatorV2 nodes)
  gradient_model.onnx form (b): the same gradient graph without accumulators, as
                      onnxblock's build_gradient_graph returns it (inputs: user inputs
                      then parameters; outputs: loss, then <param>_grad per parameter)
  inputs.npz          user inputs (including the loss's target / labels), keyed by ONNX name
  params.npz          parameter values, keyed by ONNX name
  reference.npz       ORT's results: the loss (keyed by its ONNX output name) and each
                      <param>_grad, computed by the training api's Module on form (a);
                      form (b) run in an InferenceSession must agree (checked here)
  masks.npz           only with Dropout: ORT's mask of each Dropout node of that run, keyed
                      by the node's mask output name (form b with the masks as extra
                      outputs, run in a fresh session, reproduces the reference: checked)

plus OUT/manifest.json and the op inventory printed at the end (also written to
OUT/ops.json).  Deterministic: fixed seeds, single-threaded sessions.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import shutil
import sys
import tempfile
import types
import zipfile
from pathlib import Path

import numpy as np
import onnx

# `import onnxruntime.training` imports torch through onnxruntime.training.optim;
# artifacts and the training api do not need it, so an empty module stands in.
sys.modules.setdefault("onnxruntime.training.optim", types.ModuleType("onnxruntime.training.optim"))

import onnxruntime as ort  # noqa: E402
from onnxruntime.training import artifacts, onnxblock  # noqa: E402
from onnxruntime.training.api import CheckpointState, Module  # noqa: E402
from onnxruntime.training.onnxblock import _graph_utils, _training_graph_utils  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402
import readme  # noqa: E402

# ORT writes MaxPoolGrad and AveragePoolGrad in the ai.onnx domain, where onnx's checker knows no such op: gradir's
# schemas of them (loaded by path: ort_schemas.py imports nothing of gradir) let it check the rest of the model
_spec = importlib.util.spec_from_file_location(
    "_gradir_ort_schemas", Path(__file__).resolve().parents[2] / "gradir" / "interop" / "onnx" / "ort_schemas.py")
_schemas = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_schemas)
_schemas.register(onnx)

ort.set_default_logger_severity(3)
MAX_IR = 10  # ORT 1.19.2 refuses models above IR version 10


def _restamp(model: onnx.ModelProto) -> onnx.ModelProto:
    if model.ir_version > MAX_IR:
        model.ir_version = MAX_IR
    return model


def _loss_block(loss: tuple):
    if loss[0] == "mse":
        return onnxblock.loss.MSELoss(reduction=loss[1])
    if loss[0] == "ce":
        return onnxblock.loss.CrossEntropyLoss(reduction=loss[1], ignore_index=loss[2])
    if loss[0] == "own":
        return None
    raise ValueError(loss)


def _build(case: models.Case, tmp: Path, accumulate: bool) -> tuple[Path, Path, Path]:
    return build_artifacts(case.model, case.params, case.frozen, case.loss, tmp, accumulate)


def build_artifacts(source: onnx.ModelProto, params, frozen, loss: tuple, tmp: Path,
                    accumulate: bool) -> tuple[Path, Path, Path]:
    """generate_artifacts on a copy of `source`; without `accumulate`, onnxblock's
    accumulation step is switched off, which leaves the gradient graph exactly as
    build_gradient_graph returned it (form b).  Returns the paths of the training
    model, the eval model and the checkpoint written into `tmp`."""
    _graph_utils._GRAPH_TOKEN = 0  # generated names (onnx::loss::N) the same for every run
    saved = _training_graph_utils.build_gradient_accumulation_graph
    saved_disable = _training_graph_utils._disable_training_mode
    if not accumulate:
        _training_graph_utils.build_gradient_accumulation_graph = lambda *a, **k: None
    # the eval model keeps Dropout and BatchNormalization in training mode, so that forward.onnx computes
    # the training loss: onnxblock's switch (Dropout's training_mode input cleared, BatchNormalization's
    # attribute set to 0) also leaves a training BatchNormalization with three outputs, which ONNX's
    # shape inference then refuses ("should be 1 when Training_mode = False") and the eval model does not load
    _training_graph_utils._disable_training_mode = lambda model: None
    try:
        model = onnx.ModelProto()
        model.CopyFrom(source)
        artifacts.generate_artifacts(model, requires_grad=list(params), frozen_params=list(frozen),
                                     loss=_loss_block(loss), optimizer=None, artifact_directory=tmp)
    finally:
        _training_graph_utils.build_gradient_accumulation_graph = saved
        _training_graph_utils._disable_training_mode = saved_disable
    # generate_artifacts writes with the installed onnx's IR version: re-stamp
    for name in ("training_model.onnx", "eval_model.onnx"):
        p = tmp / name
        m = onnx.load(p)
        if m.ir_version > MAX_IR:
            onnx.save(_restamp(m), p)
    return tmp / "training_model.onnx", tmp / "eval_model.onnx", tmp / "checkpoint"


def _session_options() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return so


def _forward_model(eval_path: Path, case: models.Case) -> onnx.ModelProto:
    """The eval model (forward + loss, parameters as graph inputs; Dropout and BatchNormalization left in
    training mode, see build_artifacts) with the parameters put back as initializers: a plain ONNX model
    that computes the training loss."""
    m = onnx.load(eval_path)
    by_name = {t.name: t for t in case.model.graph.initializer}
    all_params = list(case.params) + list(case.frozen)
    keep = [i for i in m.graph.input if i.name not in all_params]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    have = {t.name for t in m.graph.initializer}
    for name in all_params:
        if name not in have:
            m.graph.initializer.append(by_name[name])
    # only the loss stays an output
    loss_out = m.graph.output[0]
    del m.graph.output[:]
    m.graph.output.append(loss_out)
    return _restamp(m)


def run_module(train: Path, evalm: Path, ckpt: Path, inputs: dict) -> tuple[dict, list[str]]:
    state = CheckpointState.load_checkpoint(str(ckpt))
    module = Module(str(train), state, str(evalm), device="cpu", session_options=_session_options())
    module.train()
    names = module.input_names()
    outs = module(*[inputs[n] for n in names])
    out_names = module.output_names()
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    ref = {n: np.asarray(v) for n, v in zip(out_names, outs)}
    for pname, p in state.parameters:
        if p.requires_grad:
            ref[f"{pname}_grad"] = np.asarray(p.grad)
    return ref, names


def run_session(path: Path, feeds: dict) -> dict:
    sess = ort.InferenceSession(str(path), _session_options(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    needed = {i.name for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in needed})))


def _input_kinds(model: onnx.ModelProto) -> dict[str, str]:
    kinds = {}
    for t in model.graph.initializer:
        dt = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name
        kinds[t.name] = f"initializer {dt}{list(t.dims)}"
    for i in model.graph.input:
        kinds.setdefault(i.name, "graph input")
    return kinds


def _ops(model: onnx.ModelProto) -> list[dict]:
    out = []
    kinds = _input_kinds(model)
    for node in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        attrs = {k: (v.decode() if isinstance(v, bytes) else [x.decode() if isinstance(x, bytes) else x for x in v]
                     if isinstance(v, list) else v) for k, v in attrs.items()}  # a GRU's activations: strings
        out.append({"domain": node.domain or "ai.onnx", "op_type": node.op_type, "attrs": attrs,
                    "inputs": list(node.input), "outputs": list(node.output),
                    "input_kinds": [kinds.get(i, "computed") if i else "absent" for i in node.input]})
    return out


def _op_types(model: onnx.ModelProto) -> list[str]:
    return sorted({f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in model.graph.node})


def save_npz(path: Path, arrays: dict) -> None:
    """np.savez's format, with fixed zip timestamps so that reruns are byte-identical."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(arrays[key], order="C"), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())


def dropout_masks(model_b: onnx.ModelProto, feeds: dict, ref: dict, case: str) -> dict[str, np.ndarray]:
    """ORT's mask of every Dropout node of form b, keyed by the node's mask output name: a copy of form b
    with the masks as extra graph outputs, run once in a fresh single-threaded session.  A seeded Dropout's
    generator starts from its seed in every new session, so this run draws the masks the training api's run
    drew: its loss and gradients must equal the reference bit for bit (checked)."""
    drops = [n for n in model_b.graph.node if n.op_type == "Dropout"]
    if not drops:
        return {}
    for n in drops:
        if not any(a.name == "seed" for a in n.attribute):
            raise SystemExit(f"{case}: Dropout {n.name} has no seed: ORT would seed it from the clock")
        if len(n.output) < 2 or not n.output[1]:
            raise SystemExit(f"{case}: Dropout {n.name} has no mask output in form b")
    m = onnx.ModelProto()
    m.CopyFrom(model_b)
    for n in drops:
        m.graph.output.append(onnx.helper.make_tensor_value_info(n.output[1], onnx.TensorProto.BOOL, None))
    with tempfile.TemporaryDirectory() as t:
        path = Path(t) / "masks.onnx"
        onnx.save(m, path)
        got = run_session(path, feeds)
    for k, v in ref.items():
        if not np.array_equal(got[k], v):
            raise SystemExit(f"{case}: the masks run's {k} differs from the training api's")
    return {n.output[1]: got[n.output[1]] for n in drops}


def generate_case(case: models.Case, out: Path) -> dict:
    d = out / case.name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    params = {t.name: onnx.numpy_helper.to_array(t) for t in case.model.graph.initializer
              if t.name in case.params or t.name in case.frozen}
    with tempfile.TemporaryDirectory() as ta, tempfile.TemporaryDirectory() as tb:
        train_a, eval_a, ckpt_a = _build(case, Path(ta), accumulate=True)
        train_b, _, _ = _build(case, Path(tb), accumulate=False)
        ref, module_inputs = run_module(train_a, eval_a, ckpt_a, case.inputs)
        missing = set(module_inputs) ^ set(case.inputs)
        if missing:
            raise SystemExit(f"{case.name}: user inputs differ from the module's: {sorted(missing)}")
        got_b = run_session(train_b, {**case.inputs, **params})
        forward = _forward_model(eval_a, case)
        shutil.copy(train_a, d / "training_model.onnx")
        shutil.copy(train_b, d / "gradient_model.onnx")
    onnx.save(forward, d / "forward.onnx")
    got_fwd = run_session(d / "forward.onnx", case.inputs)

    # form (b) and the forward model must agree with the training api
    model_b = onnx.load(d / "gradient_model.onnx")
    b_outputs = [o.name for o in model_b.graph.output]
    if set(b_outputs) != set(ref):
        raise SystemExit(f"{case.name}: form (b) outputs {b_outputs} vs module {sorted(ref)}")
    if b_outputs[1:] != [f"{p}_grad" for p in case.params]:
        raise SystemExit(f"{case.name}: form (b) outputs are not loss + <param>_grad: {b_outputs}")
    for k, v in ref.items():
        # the training api hands the scalar loss back as shape (1,): store the
        # shape the graph declares (that of form b's run)
        if v.shape != got_b[k].shape and v.size == got_b[k].size:
            ref[k] = v = v.reshape(got_b[k].shape)
    worst = 0.0
    for k, v in ref.items():
        if not np.array_equal(v, got_b[k]):
            diff = float(np.max(np.abs(v - got_b[k])) / (np.max(np.abs(v)) + 1e-30))
            worst = max(worst, diff)
    if worst > 1e-6:
        raise SystemExit(f"{case.name}: form (b) differs from the training api by {worst:g}")
    loss_name = b_outputs[0]
    fwd_loss = next(iter(got_fwd.values()))
    if not np.allclose(fwd_loss, ref[loss_name], rtol=1e-6, atol=0):
        raise SystemExit(f"{case.name}: forward.onnx loss {fwd_loss} vs {ref[loss_name]}")
    for k, v in ref.items():
        if not np.all(np.isfinite(v)):
            raise SystemExit(f"{case.name}: non-finite reference {k}")

    save_npz(d / "inputs.npz", case.inputs)
    save_npz(d / "params.npz", params)
    save_npz(d / "reference.npz", ref)
    masks = dropout_masks(model_b, {**case.inputs, **params}, ref, case.name)
    if masks:
        save_npz(d / "masks.npz", masks)
    for p in d.iterdir():
        if p.suffix == ".onnx":
            onnx.checker.check_model(onnx.load(p))
    model_a = onnx.load(d / "training_model.onnx")
    rel = lambda p: f"{case.name}/{p}"  # noqa: E731
    base = {"case": case.name, "description": case.what, "opset": case.opset,
            "reference": rel("reference.npz"), "loss": loss_name,
            "params": list(case.params), "frozen": list(case.frozen), "user_inputs": sorted(case.inputs),
            "b_max_rel_diff": worst}
    if masks:
        base["masks"] = rel("masks.npz")
    entries = [
        {**base, "form": "a", "model": rel("training_model.onnx"),
         "inputs": [rel("inputs.npz"), rel("params.npz")], "op_types": _op_types(model_a)},
        {**base, "form": "b", "model": rel("gradient_model.onnx"),
         "inputs": [rel("inputs.npz"), rel("params.npz")], "op_types": _op_types(model_b)},
        {**base, "form": "forward", "model": rel("forward.onnx"),
         "inputs": [rel("inputs.npz")], "op_types": _op_types(forward)},
    ]
    ops = {"a": _ops(model_a), "b": _ops(model_b)}
    for op in ops["a"] + ops["b"]:
        op["case"] = case.name
    return {"entries": entries, "ops": ops}


def inventory(all_ops: list[dict]) -> dict:
    """(domain, op_type) -> attribute names and the values seen, across training graphs."""
    inv: dict = {}
    for op in all_ops:
        key = f"{op['domain']}:{op['op_type']}"
        slot = inv.setdefault(key, {"count": 0, "attrs": {}, "input_arity": set(), "input_kinds": {},
                                    "cases": []})
        slot["count"] += 1
        if op["case"] not in slot["cases"]:
            slot["cases"].append(op["case"])
        slot["input_arity"].add(len(op["inputs"]))
        for pos, kind in enumerate(op["input_kinds"]):
            kind = kind.split("[")[0] if kind.startswith("initializer") else kind
            seen = slot["input_kinds"].setdefault(str(pos), [])
            if kind not in seen:
                seen.append(kind)
        for k, v in op["attrs"].items():
            vals = slot["attrs"].setdefault(k, [])
            rep = json.dumps(v if not isinstance(v, float) else round(v, 7))
            if rep not in vals:
                vals.append(rep)
    for slot in inv.values():
        slot["input_arity"] = sorted(slot["input_arity"])
    return dict(sorted(inv.items()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", default=str(Path(__file__).resolve().parents[2] / "tests" / "data" / "onnx"))
    ap.add_argument("-k", "--only", help="generate only cases whose name contains this")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    entries, all_ops, fwd_ops = [], [], {}
    for case in models.cases():
        if args.only and args.only not in case.name:
            continue
        res = generate_case(case, out)
        entries += res["entries"]
        all_ops += res["ops"]["a"] + res["ops"]["b"]
        for e in res["entries"]:
            if e["form"] == "forward":
                for t in e["op_types"]:
                    fwd_ops.setdefault(t, []).append(case.name)
        print(f"{case.name:40s} ok  ({len(res['ops']['b'])} nodes in form b)", flush=True)
    if not entries:
        raise SystemExit(f"no case matches {args.only!r}")
    if args.only:
        return 0
    manifest = {"generator": "scripts/ort_fixtures/generate.py",
                "onnxruntime": ort.__version__, "onnx": onnx.__version__, "numpy": np.__version__,
                "entries": entries}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    inv = inventory(all_ops)
    (out / "ops.json").write_text(json.dumps(inv, indent=1) + "\n")
    readme.write(out, manifest, inv, dict(sorted(fwd_ops.items())))
    print(f"\n{len(inv)} op types across the training graphs (forms a and b):")
    for key, slot in inv.items():
        attrs = "; ".join(f"{k}={'|'.join(v)}" for k, v in slot["attrs"].items())
        kinds = " ".join(f"{p}:{'/'.join(k)}" for p, k in slot["input_kinds"].items())
        print(f"  {key:45s} x{slot['count']:<4d} inputs {slot['input_arity']}  {attrs}\n      {kinds}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
