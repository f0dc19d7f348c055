"""How fast is `gradir check` on a big file?  Generates an N-op graph (default
100,000: a chain of element-wise activation ops and their ORT gradients), then
times parse + verify, and reports lines/s next to a baseline measured in the
same run: reading the file and splitting it into lines and tokens with Python's
`str.split` (the least any parser must do).  ``--comments`` documents the file
the way people do (a trailing comment on every third line, a blank line and a
comment line every 50 lines), which the printer must keep and align.

    python benchmarks/bench_check.py [--ops 100000] [--comments]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import gradir  # noqa: E402

OPS = ["Relu", "Sigmoid", "Tanh", "LeakyRelu", "QuickGelu"]
GRADS = ["ReluGrad", "SigmoidGrad", "TanhGrad", "LeakyReluGrad(alpha=0.2)", "QuickGeluGrad"]


def generate(n_ops: int) -> str:
    lines = ["# generated benchmark graph", "graph big", "input t0 : Float32 [64, 128]",
             "input t1 : Float32 [64, 128]"]
    n = 2
    prev = "t0"
    for k in range(n_ops):
        if k % 2 == 0:
            op = OPS[(k // 2) % len(OPS)]
            lines.append(f"t{n} = {op}({prev}) : Float32 [64, 128]")
        else:
            g = GRADS[(k // 2) % len(GRADS)]
            name, _, attr = g.partition("(")
            attr = ", " + attr.rstrip(")") if attr else ""
            lines.append(f"t{n} = {name}(t1, {prev}{attr}) : Float32 [64, 128]")
        prev = f"t{n}"
        n += 1
    lines.append(f"output {prev}")
    return "\n".join(lines) + "\n"


def commented(text: str) -> str:
    """``text`` with comment lines, blank lines and trailing comments, in canonical form."""
    out: list[str] = []
    for k, line in enumerate(text.split("\n")[:-1]):
        if k % 50 == 10:
            out += ["", '# a section of the graph, with a "quoted" word']
        out.append(line + (f"  # trailing comment {k}" if k % 3 == 0 and not line.startswith("#") else ""))
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--comments", action="store_true", help="comment the file (kept and aligned by the printer)")
    args = ap.parse_args()
    text = generate(args.ops)
    if args.comments:
        text = commented(text)
    with tempfile.NamedTemporaryFile("w", suffix=".gir", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        n_lines = text.count("\n")
        t0 = time.perf_counter()
        with open(path, encoding="utf-8") as fh:
            n_tok = sum(len(line.split()) for line in fh.read().splitlines())
        base = time.perf_counter() - t0
        gradir.parse("input t0 : Float32 [1]\noutput t0\n")  # build the parser outside the timing
        t0 = time.perf_counter()
        g = gradir.load(path)
        t_check = time.perf_counter() - t0
        t0 = time.perf_counter()
        text2 = g.to_text()
        t_print = time.perf_counter() - t0
        print(f"file: {args.ops} ops, {n_lines} lines, {len(text) / 1e6:.1f} MB, {n_tok} whitespace tokens")
        print(f"baseline read+split    : {base * 1e3:8.1f} ms")
        print(f"parse + verify (check) : {t_check * 1e3:8.1f} ms  = {n_lines / t_check:,.0f} lines/s "
              f"({t_check / base:.0f}x the baseline)   goal: well under 10 s -> "
              f"{'met' if t_check < 5 else 'NOT met'}")
        print(f"print (to_text)        : {t_print * 1e3:8.1f} ms  = {n_lines / t_print:,.0f} lines/s")
        assert text2 == text  # canonical, comments and all
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
