"""The kernel tables: one per backend (``TABLES[backend]``), each mapping an op *class* to its kernel.
``KERNELS`` is the ``cpu`` table, the NumPy/numba kernels below (the ``reference`` backend calls
these too, one after another); a backend with kernels of its own registers them with
``@kernel(OpClass, backend=...)`` and names its table in its ``kernels`` attribute (``backends.py``).
An op name (``"Relu"``) is still accepted wherever a class is, as a deprecated alias.

Generated kernels.  An op with a ``FORMULA`` and no kernel registered for it gets one from the
formula (``gradir.backends.cpu.kernels.generated``): a NumPy path (the formula in the operands' dtype) and,
for Float32/Float64, the compiled loop the fusion pass would build for the op alone, so a fused
group gives the unfused op's bits.  A hand-written kernel is an override (a test checks it against
the formula).

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

A kernel with a compiled path (``gradir.backends.cpu.kernels.jit``) registers ``warm``: called
with a dtype, it builds (or loads from numba's disk cache) the machine code that
kernel will use for that dtype.  ``gradir.compile`` calls it, so a run never pays
for compilation.
"""

from __future__ import annotations

from .registry import KERNELS, TABLES, KernelInfo, KernelTable, get_kernel, kernel

__all__ = ["KernelInfo", "KernelTable", "KERNELS", "TABLES", "kernel", "get_kernel"]

# Families register themselves on import.
from . import parallel  # noqa: E402,F401
from . import activation, constant, fused, loss, lstm, math, shape  # noqa: E402,F401

# ... and so does any other module here (a new family file needs no line above; ``_jit_*`` modules are
# compiled code, loaded by ``jit.load`` when first used)
import importlib as _importlib  # noqa: E402
import pkgutil as _pkgutil  # noqa: E402

for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    if not _module.startswith("_"):
        _importlib.import_module(f"{__name__}.{_module}")
from . import generated, registry, widths  # noqa: E402

registry.HOOKS.update(width=widths.step_width, generate=generated.generated_kernel)
KERNELS.fusion = fused  # what the cpu kernels' fused loops can take (``gradir.backends.base.fusion``)
