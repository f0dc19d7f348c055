"""OpenBLAS's idle threads: make them sleep soon, before NumPy loads OpenBLAS.

After each multi-threaded call, OpenBLAS's pool threads spin for ``2**n`` TSC cycles before they
sleep, ``n = OPENBLAS_THREAD_TIMEOUT`` (default 28: about 0.1 s here).  While they spin they take
a core from whatever runs next, and gradir runs kernels right after each other on two cores:
measured on AMD Zen 3, a 4096² ``TanhGrad`` took 12.1-12.5 ms right after a GEMM against
9.4-9.5 ms after idling, and ``LSTMGrad``'s two half-batch loops 53 instead of 31 ms.  With
``n = 20`` (~0.4 ms) both took their idle times, and back-to-back GEMMs were as fast.

OpenBLAS reads the variable once, when it loads, so this module runs first in ``gradir``'s
``__init__``: when NumPy is not imported yet, it sets the variable unless the user already
has.  Child processes inherit it.  ``EFFECTIVE`` is the ``n`` OpenBLAS most likely runs with.
"""

from __future__ import annotations

import os
import re
import sys

VAR = "OPENBLAS_THREAD_TIMEOUT"
GRADIR_DEFAULT = 20
OPENBLAS_DEFAULT = 28

NUMPY_FIRST = "numpy" in sys.modules  # then OpenBLAS (if NumPy uses it) has read its setting already
if not NUMPY_FIRST:
    os.environ.setdefault(VAR, str(GRADIR_DEFAULT))


def effective(value: str | None) -> int:
    """The spin exponent OpenBLAS takes from the variable's value, by its own rules: C's
    ``atoi`` (leading blanks, a sign and the digits that follow; ``"20x"`` is 20), then not
    positive means the default, otherwise clamped to 4..30."""
    m = re.match(r"\s*([+-]?\d+)", value or "")
    n = int(m.group(1)) if m else 0
    return OPENBLAS_DEFAULT if n <= 0 else min(30, max(4, n))


# With NumPy imported first, the variable as it is now is the best guess of what OpenBLAS read.
EFFECTIVE = effective(os.environ.get(VAR))
