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
registered per backend with ``@kernel(op, backend=...)``; both backends here use ``cpu``'s) and
``lower(graph, program, plan, threads)``
returning an object with ``run(inputs, check_numerics=False, trace=None)``; it registers
itself with ``register_backend`` (``runtime.py`` registers ``cpu``, ``reference.py``
``reference``).  This module imports neither, so nothing here closes an import cycle.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

from .errors import ArgumentError

__all__ = ["Backend", "BACKENDS", "register_backend", "get_backend"]


class Backend(Protocol):
    name: str
    kernels: str  # its kernel table, ``gradir.kernels.TABLES[kernels]``

    def lower(self, graph: Any, program: Any, plan: Any, threads: Optional[int]) -> Any: ...


BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    BACKENDS[backend.name] = backend
    return backend


def get_backend(name: object) -> Backend:
    if not isinstance(name, str) or name not in BACKENDS:
        raise ArgumentError(f"unknown backend {name!r}; the backends are {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name]
