"""The kernel tables: one per backend (``TABLES[backend]``), each mapping an op name to its kernel.
``KERNELS`` is the ``cpu`` table, the NumPy/numba kernels below (the ``reference`` backend calls
these too, one after another); a backend with kernels of its own registers them with
``@kernel(name, backend=...)`` and names its table in its ``kernels`` attribute (``backends.py``).

Calling convention (every kernel follows it):

    fn(*operands, out=None, **attrs) -> ndarray | tuple[ndarray, ...]

* ``operands`` are NumPy arrays in the op's operand order; an omitted optional
  operand is passed as ``None``.  Kernels never modify an operand, except that an
  ``inplace`` kernel must give the right answer when ``out`` *is* one of its
  operands (the runtime's buffer plan reuses a dying operand's buffer).
* ``out`` is ``None`` or a preallocated, C-contiguous array of the result's shape
  and dtype (a tuple of them for multi-result ops, entries may be ``None``).
  When given, the kernel writes into it and returns it.
* ``attrs`` are ``op.kernel_attrs()``: the op's attributes by name, with defaults filled in
  (``Constant`` passes its cached ``array`` instead of its text value).
* A result never shares memory with an operand (no views), unless ``out`` is
  that operand: the runtime recycles a dead operand's buffer, which must not
  still back a live result.  A test checks every kernel for this.

A kernel with a compiled path (``gradir.kernels.jit``) registers ``warm``: called
with a dtype, it builds (or loads from numba's disk cache) the machine code that
kernel will use for that dtype.  ``gradir.compile`` calls it, so a run never pays
for compilation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["KernelInfo", "KERNELS", "TABLES", "kernel", "get_kernel"]


@dataclass(frozen=True)
class KernelInfo:
    name: str
    fn: Callable[..., Any]
    inplace: bool = False  # result may share the buffer of a same-shaped operand
    blas: bool = False  # spends its time in BLAS (limits BLAS threads when run concurrently)
    ufunc: Any = None  # a NumPy ufunc computing exactly this op (no attributes): used for tiny arrays
    warm: Callable[[Any], None] | None = None  # warm(dtype): compile this kernel's compiled path ahead
    # prepare(op, types): build what this kernel needs for this very op (a fused loop), at compile time
    prepare: Callable[[Any, Any], None] | None = None
    # the numba function of ``_jit_act`` computing one element of the compiled Float32 path from the
    # operands alone: a fused Float32 loop calls it, and so gives this kernel's bits
    scalar: str | None = None


TABLES: dict[str, dict[str, KernelInfo]] = {"cpu": {}}
KERNELS: dict[str, KernelInfo] = TABLES["cpu"]


def kernel(name: str, *, backend: str = "cpu", inplace: bool = False, blas: bool = False, ufunc: Any = None,
           warm: Callable[[Any], None] | None = None, prepare: Callable[[Any, Any], None] | None = None,
           scalar: str | None = None) -> Callable:
    """Decorator: register ``fn`` as the kernel of op ``name`` in ``backend``'s table.

    ``ufunc``: a NumPy ufunc that gives bit-identical results for this op; the
    runtime calls it directly for tiny arrays, where a kernel's own overhead shows.
    ``warm``: see the module docstring.
    """

    def register(fn: Callable) -> Callable:
        table = TABLES.setdefault(backend, {})
        if name in table:
            raise ValueError(f"kernel for {name!r} registered twice for backend {backend!r}")
        table[name] = KernelInfo(name, fn, inplace=inplace, blas=blas, ufunc=ufunc, warm=warm, prepare=prepare,
                                 scalar=scalar)
        return fn

    return register


def get_kernel(name: str, backend: str = "cpu") -> KernelInfo | None:
    return TABLES.get(backend, {}).get(name)


# Families register themselves on import.
from . import parallel  # noqa: E402,F401
from . import activation, constant, fused, loss, lstm, math, shape  # noqa: E402,F401
