"""The backend seam: a compiled graph's schedule (``schedule.Plan``: order, dependencies,
liveness, the memory plan; plain data that pickles) is lowered by a backend into something
that runs.

``gradir.compile(graph, backend="cpu")`` picks one by name:

* ``cpu`` (the default): the thread-pool executor with in-place reuse, a buffer pool and
  generated straight-line code (``runtime.Executable``, ``executor.py``);
* ``reference``: the same kernels called one after another on the caller's thread, every
  result in a fresh array: no pool, no in-place writes, no threads.  It is the yardstick the
  tests hold the CPU backend to (the same bits for every sample).

A backend is an object with a ``name``, the name of its kernel table (``kernels``: kernels are
registered per backend with ``@kernel(OpClass, backend=...)``; both backends here use ``cpu``'s) and
``lower(graph, program, plan, threads)``
returning an object with ``run(inputs, check_numerics=False, trace=None)``; it registers
itself with ``register_backend`` (``runtime.py`` registers ``cpu``, ``reference.py``
``reference``).  This module imports neither, so nothing here closes an import cycle.

The middle (passes, schedule, cost model) asks a backend what it can do through the functions
here, never importing the kernels: ``kernel_info(backend, op_cls)`` (its kernel's facts: in place,
BLAS, splits, width, its function), ``fusion(backend)`` (what its fused loops can take, or None).
A backend may answer them itself (methods ``kernel_info(op_cls)``, ``fusion()``); else they come
from its kernel table, ``TABLES[backend.kernels]`` (filled by ``gradir.backends.cpu.kernels``).
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

from ..errors import ArgumentError

__all__ = ["Backend", "BACKENDS", "TABLES", "register_backend", "get_backend", "kernel_info", "fusion", "table"]


class Backend(Protocol):
    name: str
    kernels: str  # its kernel table, ``TABLES[kernels]``

    def lower(self, graph: Any, program: Any, plan: Any, threads: Optional[int]) -> Any: ...


# kernel table name -> the table (op class -> kernel facts; ``gradir.backends.cpu.kernels.KernelTable``).  The
# kernels register theirs here; the table's ``fusion`` attribute (when set) is what its fused loops
# can take (``gradir.backends.cpu.kernels.fused``).
TABLES: dict[str, Any] = {}


def table(backend: "Backend | str") -> Any:
    """The kernel table of ``backend`` (a backend or a table name), or None."""
    name = backend if isinstance(backend, str) else backend.kernels
    return TABLES.get(name)


def kernel_info(backend: "Backend | str", op_cls: Any) -> Any:
    """``op_cls``'s kernel on ``backend`` (a ``KernelInfo``-like record), or None when it has none."""
    ask = getattr(backend, "kernel_info", None)
    if ask is not None:
        return ask(op_cls)
    t = table(backend)
    return None if t is None else t.get(op_cls)


def fusion(backend: "Backend | str") -> Any:
    """What ``backend``'s fused element-wise loops can take (``gradir.backends.cpu.kernels.fused``'s interface:
    ``can_fuse``, ``element_function``, ``sum_layout``, ``SUM_MIN_STRIP``), or None: no fusion."""
    ask = getattr(backend, "fusion", None)
    if callable(ask):
        return ask()
    t = table(backend)
    return getattr(t, "fusion", None)


BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    BACKENDS[backend.name] = backend
    return backend


def get_backend(name: object) -> Backend:
    if not isinstance(name, str) or name not in BACKENDS:
        raise ArgumentError(f"unknown backend {name!r}; the backends are {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name]
