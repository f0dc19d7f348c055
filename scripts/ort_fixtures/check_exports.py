"""Run the models gradir exported (tests/data/onnx/exported, from export_samples.py) in ONNX Runtime's
training build and store its outputs beside them (NAME.ort.npz, keyed by ONNX output name), for
tests/test_onnx.py to compare with gradir's.  Run with the ORT venv (setup_venv.sh):

    ../venv-ort/bin/python scripts/ort_fixtures/check_exports.py
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIR = os.path.join(ROOT, "tests", "data", "onnx", "exported")


def main() -> int:
    with open(os.path.join(DIR, "exports.json"), encoding="utf-8") as f:
        names = json.load(f)["exported"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # run the ops as written
    failed = {}
    for name in names:
        try:
            sess = ort.InferenceSession(os.path.join(DIR, name + ".onnx"), opts, providers=["CPUExecutionProvider"])
            with np.load(os.path.join(DIR, name + ".inputs.npz")) as z:
                feed = {k: z[k] for k in z.files}
            outs = sess.run(None, feed)
        except Exception as e:  # noqa: BLE001 - reported, the others still run
            failed[name] = f"{type(e).__name__}: {e}"
            continue
        np.savez(os.path.join(DIR, name + ".ort.npz"), **{o.name: a for o, a in zip(sess.get_outputs(), outs)})
        print(f"{name}: ran ({len(outs)} outputs)")
    with open(os.path.join(DIR, "ort_runs.json"), "w", encoding="utf-8") as f:
        json.dump({"onnxruntime": ort.__version__, "ran": [n for n in names if n not in failed],
                   "failed": failed}, f, indent=1)
        f.write("\n")
    for k, v in failed.items():
        print(f"FAILED {k}: {v}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
