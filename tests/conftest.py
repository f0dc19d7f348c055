import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from gradir.backends.cpu.kernels import jit  # noqa: E402

# Every run of the suite draws the same examples (derandomized: a test's time and outcome never
# depend on the draw).  ``--hypothesis-profile=explore`` draws new ones, for a developer hunting bugs.
settings.register_profile("fixed", max_examples=60, deadline=None, derandomize=True)
settings.register_profile("explore", max_examples=60, deadline=None)
settings.load_profile("fixed")


@pytest.fixture(params=["compiled", "numpy"])
def kernel_path(request: pytest.FixtureRequest):
    """Run a test on the compiled kernels (numba, a core dependency), then on the NumPy ones."""
    if request.param == "numpy":
        with jit.disabled():
            yield request.param
    else:
        assert jit.available(), f"compiled kernels unavailable: {jit.why_unavailable()}"
        saved = jit._on  # the switch itself (disabled() blocks are counted apart)
        jit.set_enabled(True)
        try:
            yield request.param
        finally:
            jit.set_enabled(saved)
