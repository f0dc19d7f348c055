"""The kernel registry of the CPU backend: ``KernelInfo``, the table keyed by op class (``KERNELS``),
``@kernel(OpClass)`` and ``get_kernel`` (the calling convention: ``gradir.backends.cpu.kernels``).
The families import it; the package imports the families (so nothing imports back up)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator, MutableMapping, Optional

from ...base import TABLES
from ....ir.op import OPS, Op

__all__ = ["KernelInfo", "KernelTable", "KERNELS", "TABLES", "kernel", "get_kernel"]


@dataclass(frozen=True)
class KernelInfo:
    name: str
    fn: Callable[..., Any]
    inplace: bool = False  # result may share the buffer of a same-shaped operand
    blas: bool = False  # spends its time in BLAS (single-threaded in runs; splits its products itself)
    ufunc: Any = None  # a NumPy ufunc computing exactly this op (no attributes): used for tiny arrays
    warm: Callable[[Any], None] | None = None  # warm(dtype): compile this kernel's compiled path ahead
    splits: bool = False  # splits large arrays into row chunks over the cores it is given (parallel_rows)
    # prepare(op, types): build what this kernel needs for this very op (a fused loop), at compile time
    prepare: Callable[[Any, Any], None] | None = None
    # the numba function of ``_jit_act`` computing one element of the compiled Float32 path from the
    # operands alone (hand-written kernels only): a fused Float32 loop calls it, and so gives this kernel's bits
    scalar: str | None = None
    # width(operands, results, attrs): how many cores the kernel can keep busy for these types
    # (``gradir.transforms.cost.step_width`` asks it; None: one core, or the row-chunk rule for ``splits``)
    width: Callable[[Any, Any, Any], int] | None = None
    # scratch(operands, results, attrs) -> bytes: what the kernel allocates beside its results while it runs
    # (its temporaries at their peak, by the operand and result types); the plan counts it in the step's
    # bytes (``Plan.curve``) and the peak.  None: nothing worth counting.  A kernel keeps no buffer past its
    # step: what outlives it is memory the plan cannot see.
    scratch: Callable[[Any, Any, Any], int] | None = None
    # kept(operands, results, attrs) -> bytes, or {buffer name: bytes}: the part of its scratch the kernel keeps
    # on its thread for its next call (LSTMGrad's da, Conv's columns): held from its first run on, the plan
    # counts each name's largest at every step (a number is named by the op)
    kept: Callable[[Any, Any, Any], int] | None = None
    # donate(operands, results, attrs) -> [(result index, operand index), ...]: besides ``inplace``, the pairs
    # where the kernel may write a result over an operand's buffer of the same dtype and number of elements
    # (the shapes may differ: the buffer is reshaped) because it reads what it needs of the operand first;
    # the plan donates the operand when it dies at the step (``schedule.build_plan``)
    donate: Callable[[Any, Any, Any], Any] | None = None
    op: Optional[type] = None  # the op class it computes
    generated: bool = False  # made from the op's FORMULA (``gradir.backends.cpu.kernels.generated``)

    def __post_init__(self) -> None:
        if self.width is None and (self.blas or self.splits or self.name in _WIDE):
            # the default: the products', LSTMs' and row chunks' rules (``widths``)
            object.__setattr__(self, "width", partial(_default_width, self.name, self.blas, self.splits))


def _default_width(name: str, blas: bool, splits: bool, operands: Any, results: Any, attrs: Any) -> int:
    return HOOKS["width"](name, blas, splits, operands, results, attrs)


# kernels with a width rule of their own in ``widths.step_width`` (besides those that are blas or split)
_WIDE = frozenset({"MatMul", "FusedMatMul", "LSTMTraining", "LSTMGrad", "LSTMTrainingCheckpointed",
                   "LSTMGradRecompute", "LSTMCell", "GradLSTMCellInput", "GradLSTMCellInputFused"})


def _op_class(key: object) -> type:
    """The op class a table key names: a class, an op instance, or (deprecated) an op name."""
    if isinstance(key, type) and issubclass(key, Op):
        return key
    if isinstance(key, Op):
        return type(key)
    if isinstance(key, str):
        cls = OPS.get(key) or _UNREGISTERED.get(key)
        if cls is not None:
            return cls
        raise KeyError(key)
    raise TypeError(f"kernels are keyed by op class, not {type(key).__name__}")


# What the package installs once its families are loaded (``kernels/__init__.py``): the width rule of the
# products, LSTMs and row chunks (``widths.step_width``) and the generator of kernels from a ``FORMULA``
# (``generated.generated_kernel``).  Both import kernel families, which import this module: so this module
# names neither, and nothing imports back up.
HOOKS: dict[str, Callable[..., Any]] = {}


# op classes with kernels that ``OPS`` does not list (``FusedElementwise``), by name
_UNREGISTERED: dict[str, type] = {}


class KernelTable(MutableMapping):
    """One backend's kernels by op class (an op instance or, deprecated, an op name also works).

    A table that ``generates`` gives an op with a ``FORMULA`` and no registered kernel a generated
    one on first lookup (kept apart from the registered ones: iteration lists those).  Deleting an
    op's kernel means "no kernel" (nothing is generated for it then) until one is set again."""

    def __init__(self, name: str, generates: bool = False) -> None:
        self.name = name
        self.generates = generates
        self._kernels: dict[type, KernelInfo] = {}
        self._generated: dict[type, KernelInfo] = {}
        self._removed: set[type] = set()
        self.fusion: Any = None  # what its fused loops can take (``gradir.backends.base.fusion``), if any

    def __getitem__(self, key: object) -> KernelInfo:
        if type(key) is type:  # an op class with a registered kernel: the common case, kept fast
            info = self._kernels.get(key)  # type: ignore[call-overload]
            if info is not None:
                return info
        try:
            cls = _op_class(key)
        except TypeError:
            raise KeyError(key) from None
        info = self._kernels.get(cls)
        if info is not None:
            return info
        if self.generates and cls not in self._removed and getattr(cls, "FORMULA", None) is not None:
            info = self._generated.get(cls)
            if info is None:
                info = self._generated[cls] = HOOKS["generate"](cls)
            return info
        raise KeyError(key)

    def __setitem__(self, key: object, info: KernelInfo) -> None:
        cls = _op_class(key)
        self._removed.discard(cls)
        self._kernels[cls] = info

    def __delitem__(self, key: object) -> None:
        cls = _op_class(key)
        if cls not in self._kernels and cls not in self._generated:
            raise KeyError(key)
        self._kernels.pop(cls, None)
        self._generated.pop(cls, None)
        self._removed.add(cls)

    def __iter__(self) -> Iterator[type]:
        return iter(list(self._kernels))

    def __len__(self) -> int:
        return len(self._kernels)

    def get(self, key: object, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def registered(self, key: object) -> bool:
        """Whether ``key``'s op has a kernel registered by hand (not generated)."""
        return _op_class(key) in self._kernels


TABLES["cpu"] = KernelTable("cpu", generates=True)
KERNELS: KernelTable = TABLES["cpu"]


def kernel(op: type | str, *, backend: str = "cpu", inplace: bool = False, blas: bool = False, ufunc: Any = None,
           warm: Callable[[Any], None] | None = None, prepare: Callable[[Any, Any], None] | None = None,
           scalar: str | None = None, splits: bool = False,
           width: Callable[[Any, Any, Any], int] | None = None,
           scratch: Callable[[Any, Any, Any], int] | None = None,
           kept: Callable[[Any, Any, Any], int] | None = None,
           donate: Callable[[Any, Any, Any], Any] | None = None) -> Callable:
    """Decorator: register ``fn`` as the kernel of op class ``op`` in ``backend``'s table (an op name
    is accepted as a deprecated alias).

    ``ufunc``: a NumPy ufunc that gives bit-identical results for this op; the
    runtime calls it directly for tiny arrays, where a kernel's own overhead shows.
    ``warm``: see the module docstring.  ``splits``: the kernel divides large arrays over the
    cores the runtime gives it (``parallel.threads_here``); the scheduler then gives it more than one.
    ``scratch``: the bytes it allocates beside its results (``KernelInfo.scratch``); ``kept``: those it keeps
    for its next call.  ``donate``: the (result, operand) pairs it may write over (``KernelInfo.donate``).
    """

    cls = _op_class(op)
    if cls.op_name not in OPS:
        _UNREGISTERED[cls.op_name] = cls

    def register(fn: Callable) -> Callable:
        table = TABLES.get(backend)
        if table is None:
            table = TABLES[backend] = KernelTable(backend)
        if table.registered(cls):
            raise ValueError(f"kernel for {cls.op_name!r} registered twice for backend {backend!r}")
        table[cls] = KernelInfo(cls.op_name, fn, inplace=inplace, blas=blas, ufunc=ufunc, warm=warm, prepare=prepare,
                                scalar=scalar, splits=splits, width=width, scratch=scratch, kept=kept, donate=donate,
                                op=cls)
        return fn

    return register


def get_kernel(op: object, backend: str = "cpu") -> KernelInfo | None:
    """The kernel of ``op`` (an op class or instance; an op name, deprecated) in ``backend``'s table."""
    table = TABLES.get(backend)
    return None if table is None else table.get(op)
