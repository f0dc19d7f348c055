"""Ask ONNX Runtime's training build about any model (developer tool, not used by tests).

Run with the venv of setup_venv.sh:

  # run a model (e.g. one `gradir export` wrote) with ORT's training-build kernels
  ../venv-ort/bin/python scripts/ort_fixtures/ort_tool.py run MODEL.onnx \\
      --inputs inputs.npz [--inputs params.npz] -o ort_out.npz

  # build ORT's training graphs (forms a and b) for a forward model, ORT's results too
  ../venv-ort/bin/python scripts/ort_fixtures/ort_tool.py grad FORWARD.onnx -o DIR \\
      [--loss mse|ce|own] [--reduction mean|sum] [--ignore-index N] \\
      [--requires-grad W1 B1 ...] [--frozen ...] [--inputs user_inputs.npz]

`grad` writes DIR/training_model.onnx (form a), DIR/gradient_model.onnx (form b),
DIR/params.npz and, with --inputs (keyed by the user input names, the loss's
`target` / `labels` included), DIR/reference.npz computed by the training api.
Without --requires-grad every float initializer is trainable. `--loss own` means
the model's first output is already the loss.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate  # noqa: E402  (registers the torch-free onnxruntime.training.optim stub)


def _load_npz(paths) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for p in paths or []:
        with np.load(p, allow_pickle=False) as z:
            out.update({k: z[k] for k in z.files})
    return out


def cmd_run(args) -> int:
    import onnxruntime as ort

    feeds = _load_npz(args.inputs)
    sess = ort.InferenceSession(args.model, generate._session_options(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    missing = [n for n in names if n not in feeds]
    if missing:
        print(f"error: no array for the model's inputs {missing}", file=sys.stderr)
        return 1
    outs = generate.run_session(Path(args.model), feeds)
    generate.save_npz(Path(args.output), outs)
    for k, v in outs.items():
        print(f"{k}: {v.dtype} {list(v.shape)}")
    return 0


def cmd_grad(args) -> int:
    model = onnx.load(args.model)
    floats = [t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    params = args.requires_grad or [n for n in floats if n not in (args.frozen or [])]
    frozen = args.frozen or []
    loss = {"mse": ("mse", args.reduction), "ce": ("ce", args.reduction, args.ignore_index),
            "own": ("own",)}[args.loss]
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    values = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer
              if t.name in params or t.name in frozen}
    with tempfile.TemporaryDirectory() as ta, tempfile.TemporaryDirectory() as tb:
        train_a, eval_a, ckpt = generate.build_artifacts(model, params, frozen, loss, Path(ta), True)
        train_b, _, _ = generate.build_artifacts(model, params, frozen, loss, Path(tb), False)
        onnx.save(onnx.load(train_a), out / "training_model.onnx")
        onnx.save(onnx.load(train_b), out / "gradient_model.onnx")
        generate.save_npz(out / "params.npz", values)
        if args.inputs:
            user = _load_npz(args.inputs)
            ref, _ = generate.run_module(train_a, eval_a, ckpt, user)
            got_b = generate.run_session(train_b, {**user, **values})
            ref = {k: v.reshape(got_b[k].shape) for k, v in ref.items()}
            generate.save_npz(out / "reference.npz", ref)
            for k, v in ref.items():
                same = "same in form b" if np.array_equal(v, got_b[k]) else "DIFFERS in form b"
                print(f"{k}: {v.dtype} {list(v.shape)} ({same})")
    print(f"wrote {out}/training_model.onnx (form a), gradient_model.onnx (form b), params.npz"
          + (", reference.npz" if args.inputs else ""))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run a model in ORT's training build")
    run.add_argument("model")
    run.add_argument("--inputs", action="append", required=True, help="npz keyed by ONNX input names")
    run.add_argument("-o", "--output", required=True)
    run.set_defaults(fn=cmd_run)
    grad = sub.add_parser("grad", help="build ORT's training graphs for a forward model")
    grad.add_argument("model")
    grad.add_argument("-o", "--output", required=True, help="directory")
    grad.add_argument("--loss", choices=["mse", "ce", "own"], default="own")
    grad.add_argument("--reduction", choices=["mean", "sum"], default="mean")
    grad.add_argument("--ignore-index", type=int, default=None)
    grad.add_argument("--requires-grad", nargs="*")
    grad.add_argument("--frozen", nargs="*")
    grad.add_argument("--inputs", action="append", help="user inputs npz: also compute ORT's reference")
    grad.set_defaults(fn=cmd_grad)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
