"""Export the shipped samples (and the derived graphs of the forward ones) as ONNX models for ORT to run:
writes tests/data/onnx/exported/NAME.onnx and NAME.inputs.npz (inputs keyed by ONNX input name, drawn as
`gradir run` draws demo inputs).  Run with gradir's own environment, then run check_exports.py with ORT's
training build (see tests/data/onnx/exported/README.md):

    python scripts/ort_fixtures/export_samples.py
    ../venv-ort/bin/python scripts/ort_fixtures/check_exports.py
"""

from __future__ import annotations

import glob
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "onnx", "exported")


def graphs() -> dict[str, object]:
    """The graphs to export, by name: every sample (the derived ones included), with its path."""
    import gradir
    out = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "samples", "*.gir"))):
        name = os.path.basename(path)[:-4].replace(".", "_")
        g = gradir.load(path)
        out[name] = (os.path.relpath(path, ROOT), g)
    return out


def main() -> int:
    import gradir
    from gradir.errors import OnnxError
    from gradir.cli.run import demo_inputs
    os.makedirs(OUT, exist_ok=True)
    done, skipped = [], {}
    sources = {}
    for name, (source, g) in graphs().items():
        try:
            gradir.export_onnx(g, os.path.join(OUT, name + ".onnx"))
        except OnnxError as e:
            skipped[name] = e.messages[0]
            continue
        ins = demo_inputs(g, 0)
        np.savez(os.path.join(OUT, name + ".inputs.npz"), **{(i.label or i.name): ins[i.name] for i in g.inputs})
        done.append(name)
        sources[name] = source
    with open(os.path.join(OUT, "exports.json"), "w", encoding="utf-8") as f:
        json.dump({"exported": done, "sources": sources, "not exportable without --custom-domain": skipped}, f,
                  indent=1)
        f.write("\n")
    print(f"exported {len(done)}; not exportable for ORT: {len(skipped)}")
    for k, v in skipped.items():
        print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
