"""gradir: a compiler for backward (gradient) graphs.

Text IR (``parse``/``load``/``Graph.to_text``), a verifier with located errors,
and (in later layers) a compiler, runtime, autodiff and a Python builder.
"""

from . import _blasenv  # noqa: F401  (first: before NumPy loads OpenBLAS)
from . import ops as _ops  # noqa: F401  (registers every op)
from .errors import (ArgumentError, CompileError, Diagnostic, ExecutionError, GradirError, InputError, OnnxError,
                     OpDefinitionError, ParseError, RenderError, ShardError, Span, VerifyError)
from .ir.graph import Graph, GraphInput
from .ir.op import OPS, Attr, BackwardOp, Op, Operand
from .autodiff.driver import AutodiffError, grad
from .ops.builder import BuilderError, GraphBuilder
from .tools.dot import to_dot
from .tools.gradcheck import GradcheckReport, gradcheck
from .backends.cpu.runtime import Executable, compile
from .distributed import Sharded, shard
from .backends.reference import backend as _reference  # noqa: F401,E402  (registers the reference backend)
from .text.syntax import load, parse
from .interop.onnx import export_onnx, import_onnx
from .ir.types import DType, TensorType
from .ops.userops import load_ops

__version__ = "0.1.0"

__all__ = [
    "parse", "load", "compile", "Executable", "grad", "GraphBuilder", "AutodiffError", "BuilderError",
    "gradcheck", "GradcheckReport", "shard", "Sharded",
    "Graph", "GraphInput", "Op", "BackwardOp", "Operand", "Attr", "OPS", "DType",
    "TensorType", "GradirError", "ParseError", "VerifyError", "CompileError", "InputError",
    "ExecutionError", "ArgumentError", "ShardError", "RenderError", "OnnxError", "import_onnx", "export_onnx",
    "Diagnostic", "Span", "__version__", "to_dot", "load_ops", "OpDefinitionError",
]
