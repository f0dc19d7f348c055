"""Write the element-wise kernels of ``gradir/backends/cpu/kernels/_jit_act.py`` (development time).

Every element-wise kernel there is the same two loops around its own scalar function
``_<name>1`` (see the comment above ``TILE``): numba's disk cache keeps neither closures nor
generated source, so the loops are written out in the file, and this script writes them from
``KERNELS``, between the file's ``BEGIN``/``END`` marker lines.  ``tests/test_layout.py`` checks
that the file is current.

    python scripts/gen_jit_act.py          # rewrite the generated part
    python scripts/gen_jit_act.py --check  # exit 1 if it is not current
"""

from __future__ import annotations

import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "gradir" / "backends" / "cpu" / "kernels" / "_jit_act.py"
BEGIN = "# -- element-wise kernels: written by scripts/gen_jit_act.py from its KERNELS (do not edit) ---------\n"
END = "# -- end of the written kernels ----------------------------------------------------------------\n"

# (kernel, array operands, scalar operands); the scalar function is ``_<kernel>1``
KERNELS = [
    ("relu_grad", ("dy", "x"), ()),
    ("sigmoid_grad", ("dy", "y"), ()),
    ("tanh_grad", ("dy", "y"), ()),
    ("leaky_relu_grad", ("dy", "y"), ("alpha",)),
    ("quick_gelu_grad", ("dy", "x"), ("alpha", "bound")),
    ("gelu_grad", ("dy", "x"), ()),
    ("fast_gelu_grad", ("dy", "x"), ()),
    ("sigmoid", ("x",), ()),
    ("leaky_relu", ("x",), ("alpha",)),
    ("quick_gelu", ("x",), ("nal2e", "bound", "keep")),
    ("gelu", ("x",), ()),
    ("fast_gelu", ("x",), ()),
]


def kernel_source(name: str, arrays: tuple[str, ...], scalars: tuple[str, ...]) -> str:
    params = ", ".join(("o",) + arrays + scalars)
    whole = ", ".join([f"{a}[i]" for a in arrays] + list(scalars))
    tile = ", ".join([f"{a}_[k]" for a in arrays] + list(scalars))
    views = ", ".join(f"{a}_" for a in arrays + ("o",)) + " = " + ", ".join(f"{a}[t0:t1]" for a in arrays + ("o",))
    return f"""@njit(**ELEMENTWISE)
def {name}({params}):  # type: ignore[no-untyped-def]
    if {" and ".join(f"_apart(o, {a})" for a in arrays)}:
        for i in range(o.size):
            o[i] = _{name}1({whole})
        return
    tmp = np.empty(TILE, _F)  # in place: compute a tile privately, then copy it out
    for t0 in range(0, o.size, TILE):
        t1 = min(t0 + TILE, o.size)
        {views}
        for k in range(t1 - t0):
            tmp[k] = _{name}1({tile})
        for k in range(t1 - t0):
            o_[k] = tmp[k]
"""


def generated() -> str:
    """The part of ``_jit_act.py`` between the marker lines."""
    return "\n\n".join(kernel_source(*k) for k in KERNELS)


def render(text: str) -> str:
    """``text`` (the file) with its generated part written anew."""
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n\n{generated()}\n\n{END}{tail}"


def main(argv: list[str]) -> int:
    text = TARGET.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in argv:
        if new != text:
            print(f"{TARGET} is not current: run python scripts/gen_jit_act.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        TARGET.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
