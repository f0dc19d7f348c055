"""Reading the user's array files (``--inputs``, ``--input NAME=FILE``, shard files) with pickles
disabled: a malformed, truncated or oversized ``.npy``/``.npz`` is an ``InputError`` located at
the file, never NumPy's traceback."""

from __future__ import annotations

import contextlib
import warnings
import zipfile
from typing import Iterator, Optional

import numpy as np

from .errors import Diagnostic, InputError
from .types import DType

__all__ = ["BAD_FILE", "bad_file_message", "too_big", "npy_header", "quiet_numpy", "load_array_file", "read_npz"]


# Reading a malformed .npy/.npz can raise almost anything from NumPy's header parser and zipfile
# (ValueError, NotImplementedError for a zip format version or compression method, RuntimeError for
# an encrypted member, TypeError for a shape of booleans, tokenize.TokenError for a garbled header,
# ...): every one of them means the file is not a valid array file.  MemoryError is handled apart.
BAD_FILE = Exception


def bad_file_message(e: BaseException) -> str:
    msg = str(e).split("\n")[0][:300]
    if "Object arrays" in msg or "allow_pickle" in msg:
        return "it holds Python objects, which would need unpickling; gradir never loads pickles"
    return f"{type(e).__name__}: {msg}" if type(e) not in (ValueError, OSError) else msg


def too_big(what: str, path: str, header: Optional[tuple]) -> InputError:
    from .fileio import human_bytes
    if header is not None:
        shape, dtype = header
        n = int(np.prod(shape, dtype=object)) * dtype.itemsize
        try:
            name = DType.from_numpy(dtype).value
        except ValueError:
            name = str(dtype)
        size = f" ({name} {list(shape)}, {human_bytes(n)})"
        if what.startswith("--input "):
            size = ":" + size
    else:
        size = ""
    return InputError(Diagnostic(f"{what}{size or ': the array'} does not fit in memory", filename=path))


def npy_header(f) -> Optional[tuple]:
    """(shape, dtype) from an .npy stream's header, or None if it cannot be read."""
    try:
        fmt = np.lib.format
        version = fmt.read_magic(f)
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = read(f, max_header_size=1 << 20)
        return tuple(shape), dtype
    except Exception:  # only for a message: an unreadable header just gives no size
        return None


@contextlib.contextmanager
def quiet_numpy() -> Iterator[None]:
    """NumPy warns (a UserWarning showing its own source line) when an .npy header is in Python 2's
    form; the file loads all the same, and the user should not see NumPy's internals."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def load_array_file(path: str, what: str) -> object:
    try:
        with quiet_numpy():
            return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(Diagnostic(f"{what}: no such file", filename=path)) from None
    except IsADirectoryError:
        raise InputError(Diagnostic(f"{what}: is a directory", filename=path)) from None
    except MemoryError:
        with open(path, "rb") as f:
            header = npy_header(f)
        raise too_big(what, path, header) from None
    except BAD_FILE as e:
        msg = bad_file_message(e)
        if "allow_pickle" in str(e) and "Object arrays" not in str(e):
            msg = "it is neither .npy nor .npz (NumPy would try to unpickle it; gradir never loads pickles)"
        raise InputError(Diagnostic(f"{what}: not a valid NumPy file: {msg}", filename=path)) from None


def read_npz(path: str, what: str, npy_hint: str = "") -> dict[str, np.ndarray]:
    """The named arrays of an .npz archive, read with pickles disabled; a bad file is an ``InputError``
    naming ``what`` (the option it came from) and the file; ``npy_hint`` is added when it is a .npy."""
    data = load_array_file(path, what)
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise InputError(Diagnostic(f"{what}: expected an .npz archive of named arrays, got a single "
                                    f".npy array{npy_hint}", filename=path))
    arrays: dict[str, np.ndarray] = {}
    try:
        with data, quiet_numpy():
            for k in data.files:
                arrays[k] = data[k]
                if not isinstance(arrays[k], np.ndarray):  # NumPy hands back a member without the .npy magic
                    raise InputError(Diagnostic(f"{what}: member '{k}' is not a NumPy array (no .npy header)",
                                                filename=path))
    except MemoryError:
        header = None
        try:
            with zipfile.ZipFile(path) as zf, zf.open(k + ".npy") as f:
                header = npy_header(f)
        except Exception:  # only for a message
            pass
        raise too_big(f"{what}: array '{k}'", path, header) from None
    except InputError:
        raise
    except BAD_FILE as e:
        raise InputError(Diagnostic(f"{what}: cannot read array '{k}': {bad_file_message(e)}",
                                    filename=path)) from None
    return arrays
