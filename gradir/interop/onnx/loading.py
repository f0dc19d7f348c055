"""Reading an ONNX model as untrusted input, before any of it is imported: ``import_onnx``'s arguments,
names that are not UTF-8, external data, and each tensor's data against its shape and type.

A received model is data someone else wrote: protobuf hands a name that is not UTF-8 over as ``bytes``;
an initializer's external data names a file to read, which must not be one of the user's other files
(no ``..``, no absolute path, no symbolic link out of the model's directory, no FIFO to wait on); a
tensor's data may be shorter or longer than its shape, which ``onnx.checker`` lets through and
``onnx.numpy_helper`` fails on with bare NumPy errors.  Each is caught here and said, located, instead
of becoming a traceback, a hang or a read of something else.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any, Iterator, Optional

import numpy as np

from ...errors import Diagnostic, OnnxError, path_problem, shown
from ...errors import OnnxUnsupported as Unsupported
from .common import require_onnx

__all__ = ["tensor_array", "check_import_arguments", "read_model", "not_utf8", "all_tensors", "is_external",
           "load_external", "elem_type_name", "MAX_DIM"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# the largest size a symbolic dimension may be given (``dims``, ``--dim``): 2^62
MAX_DIM = 2 ** 62


def check_import_arguments(model: Any, dims: Any, name: Any, base_dir: Any) -> tuple[dict[str, int], Optional[str],
                                                                                Optional[str]]:
    """``import_onnx``'s arguments checked (``ArgumentError``, which says which one and why)."""
    from ...errors import ArgumentError
    onnx = require_onnx()
    if not isinstance(model, (str, os.PathLike, bytes, bytearray, onnx.ModelProto)):
        raise ArgumentError(f"import_onnx() takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
    if isinstance(model, (str, os.PathLike)):
        try:
            path = os.fspath(model)
        except Exception as e:  # noqa: BLE001 - a __fspath__ of the caller's that raises
            raise ArgumentError(f"import_onnx(): the model path cannot be read as a path ({type(e).__name__})") \
                from None
        if not isinstance(path, str) or not path or "\0" in path:
            raise ArgumentError(f"import_onnx(): the model path must be a non-empty str without NUL, got "
                                f"{shown(path)}")
        problem = path_problem(path)
        if problem:
            raise ArgumentError(f"import_onnx(): the model path {shown(path)} {problem}")
    if dims is None:
        dims = {}
    if not isinstance(dims, dict):
        raise ArgumentError(f"import_onnx(): dims must be a dict of symbolic dimension names to sizes "
                            f"({{\"batch\": 64}}), got {type(dims).__name__}")
    for k, v in dims.items():
        if not isinstance(k, str) or not k:
            raise ArgumentError(f"import_onnx(): dims: a dimension name must be a non-empty str, got {shown(k)}")
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= int(v) <= MAX_DIM:
            raise ArgumentError(f"import_onnx(): dims[{k!r}] must be an int from 1 to {MAX_DIM:,}, got {shown(v)}")
    dims = {k: int(v) for k, v in dims.items()}
    if name is not None and not isinstance(name, str):
        raise ArgumentError(f"import_onnx(): name must be a str or None, got {type(name).__name__}")
    if name is not None and not _IDENT.match(name):
        raise ArgumentError(f"import_onnx(): name {shown(name)} is not an identifier (letters, digits and _, not "
                            "starting with a digit)")
    base = None
    if base_dir is not None:
        if not isinstance(base_dir, (str, os.PathLike)):
            raise ArgumentError(f"import_onnx(): base_dir must be a path (str or os.PathLike) or None, got "
                                f"{type(base_dir).__name__}")
        try:
            base = os.fspath(base_dir)
        except Exception as e:  # noqa: BLE001
            raise ArgumentError(f"import_onnx(): base_dir cannot be read as a path ({type(e).__name__})") from None
        if not isinstance(base, str) or not base or "\0" in base:
            raise ArgumentError(f"import_onnx(): base_dir must be a non-empty str without NUL, got {shown(base)}")
        problem = path_problem(base)
        if problem:
            raise ArgumentError(f"import_onnx(): base_dir {shown(base)} {problem}")
        if not os.path.isdir(base):
            raise ArgumentError(f"import_onnx(): base_dir {base!r} is not a directory")
    return dims, name, base


def not_utf8(msg: Any, path: str = "model") -> Optional[tuple[str, bytes]]:
    """The first string field of ``msg`` (recursively) that is not valid UTF-8, as (where, its bytes):
    protobuf hands such a field over as ``bytes``, where every name is expected to be a ``str``."""
    from google.protobuf.descriptor import FieldDescriptor as F
    for field, value in msg.ListFields():
        if field.type == F.TYPE_STRING:
            items = value if _repeated(field) else [value]
            for k, v in enumerate(items):
                if not isinstance(v, str):
                    return (f"{path}.{field.name}" + (f"[{k}]" if _repeated(field) else ""), v)
        elif field.type == F.TYPE_MESSAGE:
            items = value if _repeated(field) else [value]
            for k, v in enumerate(items):
                found = not_utf8(v, f"{path}.{field.name}" + (f"[{k}]" if _repeated(field) else ""))
                if found:
                    return found
    return None


def _repeated(field: Any) -> bool:
    is_repeated = getattr(field, "is_repeated", None)  # protobuf 5.28+; ``label`` is gone in 7
    return bool(is_repeated) if is_repeated is not None else field.label == field.LABEL_REPEATED


def all_tensors(graph: Any) -> Iterator[Any]:
    """Every TensorProto of a graph: initializers, sparse initializers, node attributes, subgraphs'."""
    yield from graph.initializer
    for sp in graph.sparse_initializer:
        yield sp.values
        yield sp.indices
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor.values
                yield a.sparse_tensor.indices
            if a.HasField("g"):
                yield from all_tensors(a.g)
            for sub in a.graphs:
                yield from all_tensors(sub)


def is_external(onnx: Any, t: Any) -> bool:
    return t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL


def load_external(onnx: Any, t: Any, base: Optional[str], filename: str) -> None:
    """Read tensor ``t``'s external data into its ``raw_data``, from a file inside ``base`` only."""
    what = f"initializer {t.name!r}" if t.name else "a tensor"

    def refuse(why: str) -> OnnxError:
        return OnnxError(Diagnostic(f"{what}: its external data {why}", filename=filename))

    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    if base is None:
        raise refuse(f"(location {location!r}) has no directory to be read from: a model given as bytes or an "
                     "onnx.ModelProto has none; give import_onnx(..., base_dir=DIR), or the path of the model")
    if not location:
        raise refuse("has no location")
    if "\0" in location or os.path.isabs(location) or location.startswith(("/", "\\")) or \
            ".." in location.replace("\\", "/").split("/"):
        raise refuse(f"location {location!r} is not a relative path inside the model's directory")
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise refuse(f"offset or length is not a number ({info.get('offset')!r}, {info.get('length')!r})") from None
    if offset < 0 or (length is not None and length < 0):
        raise refuse(f"offset {offset} or length {length} is negative")
    root = os.path.realpath(base)
    path = os.path.join(root, location)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root or os.path.islink(path):
        raise refuse(f"location {location!r} leads out of the directory {base!r} (a symbolic link)")
    try:  # O_NONBLOCK: a FIFO is refused below instead of waiting for a writer
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise refuse(f"file {location!r} cannot be read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(f"location {location!r} is not a regular file")
        end = st.st_size if length is None else offset + length
        if offset > st.st_size or end > st.st_size:
            raise refuse(f"(offset {offset}, length {length}) runs past the end of {location!r} "
                         f"({st.st_size:,} bytes)")
        os.lseek(fd, offset, os.SEEK_SET)
        chunks, left = [], end - offset
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                raise refuse(f"file {location!r} ended early (it was changed while read)")
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as e:
        raise refuse(f"file {location!r} cannot be read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    del t.external_data[:]
    t.data_location = onnx.TensorProto.DEFAULT
    t.raw_data = data


# bytes per element of the types whose data tensor_array checks itself (others: onnx.numpy_helper's checks)
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
_FIELDS = {1: "float_data", 11: "double_data", 7: "int64_data", 2: "int32_data", 3: "int32_data", 4: "int32_data",
           5: "int32_data", 6: "int32_data", 9: "int32_data", 10: "int32_data", 16: "int32_data", 12: "uint64_data",
           13: "uint64_data"}


def elem_type_name(onnx: Any, t: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(t)
    except ValueError:
        return f"element type {t} (not an ONNX type)"


def tensor_array(onnx: Any, t: Any) -> np.ndarray:
    """``t``'s value as an array, or ``Unsupported`` saying what is wrong with its data: a type ONNX does not
    define, data longer or shorter than its shape, raw bytes not a whole number of elements (the checker
    lets some of these through; ``onnx.numpy_helper`` fails on them with bare NumPy errors)."""
    if t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL:
        raise Unsupported("its external data was not read")
    try:
        onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
    except Exception:  # noqa: BLE001 - KeyError, or ValueError for an unknown enum value
        raise Unsupported(f"its data type is {elem_type_name(onnx, t.data_type)}, which gradir cannot read") \
            from None
    if any(d < 0 for d in t.dims):
        raise Unsupported(f"its shape {list(t.dims)} has a negative dimension")
    n = 1
    for d in t.dims:
        n *= int(d)
    dims = list(t.dims)
    if t.HasField("raw_data") and t.data_type in _ITEMSIZE:
        size = _ITEMSIZE[t.data_type]
        if len(t.raw_data) != n * size:
            raise Unsupported(f"its raw_data has {len(t.raw_data):,} bytes; its shape {dims} of "
                              f"{elem_type_name(onnx, t.data_type)} takes {n * size:,}")
    elif not t.HasField("raw_data") and t.data_type in _FIELDS:
        got = len(getattr(t, _FIELDS[t.data_type]))
        if got != n:
            raise Unsupported(f"its {_FIELDS[t.data_type]} has {got:,} values; its shape {dims} holds {n:,}")
    try:
        a = onnx.numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001 - NumPy's and onnx's own errors on malformed data
        raise Unsupported(f"its data cannot be read ({type(e).__name__}: {e})") from None
    if a.size != n:
        raise Unsupported(f"its data has {a.size:,} values; its shape {dims} holds {n:,}")
    return a


def read_model(onnx: Any, model: Any, base: Optional[str]) -> tuple[Any, str]:
    """``import_onnx``'s model (a path, bytes or a ``ModelProto``) read, its external data loaded (from
    ``base``, or the model's own directory) and checked with ``onnx.checker``: the ``ModelProto`` (the
    caller's is never changed) and the file name errors are located at (``<model>`` without a path)."""
    filename = "<model>"
    if isinstance(model, (str, os.PathLike)):
        filename = os.fspath(model)
        try:
            proto = onnx.load(filename, load_external_data=False)
        except OSError as e:
            raise OnnxError(Diagnostic(f"cannot read the model: {e.strerror or e}", filename=filename)) from None
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
            raise OnnxError(Diagnostic(f"not an ONNX model ({type(e).__name__}: {e})", filename=filename)) from None
        if base is None:
            base = os.path.dirname(os.path.abspath(filename))
    elif isinstance(model, (bytes, bytearray)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as e:  # noqa: BLE001
            raise OnnxError(Diagnostic(f"not an ONNX model ({type(e).__name__}: {e})", filename=filename)) from None
    else:
        proto = model
    if proto.ByteSize() == 0 or not proto.HasField("graph"):  # an empty file parses as an empty model
        raise OnnxError(Diagnostic("not an ONNX model: it is empty" if proto.ByteSize() == 0 else
                                   "not an ONNX model: it has no graph", filename=filename))
    bad = not_utf8(proto)
    if bad:
        raise OnnxError(Diagnostic(f"not a valid ONNX model: {bad[0]} is not valid UTF-8 ({shown(bad[1])})",
                                   filename=filename))
    external = [t for t in all_tensors(proto.graph) if is_external(onnx, t)]
    if external:
        if proto is model:  # the caller's ModelProto is not changed: its copy gets the data
            proto = onnx.ModelProto()
            proto.CopyFrom(model)
            external = [t for t in all_tensors(proto.graph) if is_external(onnx, t)]
        for t in external:
            load_external(onnx, t, base, filename)
    try:
        onnx.checker.check_model(proto)
    except Exception as e:  # noqa: BLE001 - onnx.checker.ValidationError and C++ errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OnnxError(Diagnostic(f"the model fails onnx.checker: {first}", filename=filename)) from None
    return proto, filename
