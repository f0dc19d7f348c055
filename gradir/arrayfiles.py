"""Reading the user's array files (``--inputs``, ``--input NAME=FILE``, shard files) with pickles
disabled: a malformed, truncated or oversized ``.npy``/``.npz`` is an ``InputError`` located at
the file, never NumPy's traceback.  And writing ``.npz`` archives (``run -o``, ``--save-inputs``,
``import``'s weights): every writer goes through ``npz_bytes``, which stores each array under its key
as it is, or refuses a key that cannot be one before anything is written."""

from __future__ import annotations

import contextlib
import io
import warnings
import zipfile
from typing import Iterable, Iterator, Mapping, Optional

import numpy as np

from .errors import Diagnostic, InputError
from .ir.types import DType

__all__ = ["BAD_FILE", "bad_file_message", "too_big", "npy_header", "quiet_numpy", "load_array_file", "read_npz",
           "MAX_MEMBER_NAME", "npz_key_problems", "check_npz_keys", "npz_bytes", "write_npz"]


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
    member = k = ""
    try:
        with data, quiet_numpy():
            # by member name: NumPy's ``data[key]`` takes ``a.npy`` for the key ``a.npy`` when the archive
            # also holds ``a.npy.npy`` (the key ``a.npy``), and would hand back the wrong array
            for member in data.zip.namelist():
                k = member.removesuffix(".npy")
                if k in arrays:
                    raise InputError(Diagnostic(f"{what}: two members are the array {k!r} ({k}.npy and {k}, or "
                                                f"the same name twice); which one is meant is unclear",
                                                filename=path))
                arrays[k] = data[member]
                if not isinstance(arrays[k], np.ndarray):  # NumPy hands back a member without the .npy magic
                    raise InputError(Diagnostic(f"{what}: member '{k}' is not a NumPy array (no .npy header)",
                                                filename=path))
    except MemoryError:
        header = None
        try:
            with zipfile.ZipFile(path) as zf, zf.open(member) as f:
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


# A zip member's name is at most 65535 bytes (a 16-bit length field); a key is stored as KEY.npy.
MAX_MEMBER_NAME = 0xFFFF


def npz_key_problems(keys: Iterable[object]) -> list[str]:
    """Why some of ``keys`` cannot be the keys of an ``.npz`` that ``np.load`` reads back as written
    (empty: they can).  A key is a zip member name (``KEY.npy``): UTF-8 text of at most
    ``MAX_MEMBER_NAME`` bytes, without NUL (zipfile cuts a name there); and ``np.load``'s lookup makes
    ``KEY.npy`` the array ``KEY`` when ``KEY`` is a key too."""
    problems = []
    taken = set()
    for key in keys:
        if not isinstance(key, str):
            problems.append(f"the key {key!r} is not a str ({type(key).__name__})")
            continue
        shown = repr(key) if len(key) <= 60 else repr(key[:40]) + f"... ({len(key)} characters)"
        try:
            size = len(key.encode("utf-8")) + 4
        except UnicodeEncodeError as e:
            problems.append(f"the key {shown} is not valid Unicode text: {e.reason} at character {e.start} "
                            f"(a zip member name is UTF-8)")
            continue
        if "\0" in key:
            problems.append(f"the key {shown} contains NUL (\\u0000), which ends a zip member name")
        elif size > MAX_MEMBER_NAME:
            problems.append(f"the key {shown} is {size - 4} bytes of UTF-8; a zip member name (KEY.npy) holds "
                            f"at most {MAX_MEMBER_NAME} bytes")
        taken.add(key)
    for key in sorted(k for k in taken if isinstance(k, str) and k.endswith(".npy") and k[:-4] in taken):
        problems.append(f"the keys {key[:-4]!r} and {key!r} would be one array to np.load (it reads {key!r} "
                        f"as the array {key[:-4]!r}); rename one of them")
    return problems


def check_npz_keys(keys: Iterable[object], path: str, what: str) -> None:
    """``InputError`` located at ``path`` listing every key of ``keys`` that ``npz_bytes`` would refuse;
    the commands call it before they run, so that a refusal never comes after work or another file."""
    problems = npz_key_problems(keys)
    if problems:
        raise InputError([Diagnostic(f"cannot write {what}: {p}", filename=path) for p in problems])


def npz_bytes(arrays: Mapping[str, np.ndarray], path: str, what: str) -> bytes:
    """``arrays`` as an uncompressed ``.npz``: one ``KEY.npy`` member per key, written by name.

    ``np.savez(file, **arrays)`` passes each key as a keyword argument, so a key ``allow_pickle`` or
    ``file`` is taken for NumPy's own parameter (the array silently dropped, or a ``TypeError``); here the
    member names are given to zipfile and the arrays to ``np.lib.format.write_array``.  Bad keys and
    arrays of Python objects are refused (``InputError`` at ``path``, naming ``what``) before anything is
    written.  Members carry a fixed date, so the same arrays always give the same bytes."""
    check_npz_keys(arrays, path, what)
    for key, a in arrays.items():
        if np.asarray(a).dtype.hasobject:
            raise InputError(Diagnostic(f"cannot write {what}: {key!r} holds Python objects, which gradir never "
                                        f"pickles", filename=path))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, a in arrays.items():
            info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o600 << 16  # what zipfile gives a member opened by name (as np.savez does)
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=False)
    return buf.getvalue()


def write_npz(path: str, arrays: Mapping[str, np.ndarray], what: str = "outputs") -> None:
    """Write ``arrays`` to ``path`` (``-``: standard output) as ``npz_bytes`` makes them, atomically
    (``fileio.write_file``)."""
    from .fileio import write_file
    data = npz_bytes(arrays, path, what)
    try:
        write_file(path, data)
    except OSError as e:
        raise InputError(Diagnostic(f"cannot write {what}: {e.strerror or e}", filename=path)) from None
