"""OpenBLAS's idle-thread spin (gradir._blasenv): set before NumPy loads, never over the user's
setting, and it really stops the pool threads from taking a core after a call.  Each case runs
in a fresh interpreter, since OpenBLAS reads the setting once, when it loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gradir import _blasenv

VAR = "OPENBLAS_THREAD_TIMEOUT"


def run(code: str, **env: str | None) -> dict:
    e = {k: v for k, v in os.environ.items() if k != VAR}
    for k, v in env.items():
        if v is not None:
            e[k] = v
    out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


REPORT = ("import json, os; from gradir import _blasenv; from gradir.backends.cpu.kernels import parallel; "
          f"print(json.dumps([os.environ.get('{VAR}'), _blasenv.EFFECTIVE, parallel.blas_idle_threads_sleep()]))")


def test_set_when_gradir_comes_before_numpy():
    value, effective, sleeps = run("import gradir; " + REPORT)
    assert value == str(_blasenv.GRADIR_DEFAULT) and effective == _blasenv.GRADIR_DEFAULT
    assert sleeps  # NumPy's OpenBLAS (pthreads): the kernels may then use their own two threads


def test_the_users_setting_wins():
    value, effective, sleeps = run("import gradir; " + REPORT, **{VAR: "25"})
    assert (value, effective, sleeps) == ("25", 25, False)


def test_numpy_first_leaves_openblas_alone():
    value, effective, sleeps = run("import numpy; import gradir; " + REPORT)
    assert (value, effective, sleeps) == (None, _blasenv.OPENBLAS_DEFAULT, False)
    # ... unless the user set it for the whole process
    value, effective, sleeps = run("import numpy; import gradir; " + REPORT, **{VAR: "18"})
    assert (value, effective, sleeps) == ("18", 18, True)


@pytest.mark.parametrize("value,expected", [(None, 28), ("", 28), ("x", 28), ("0", 28), ("-3", 28), ("2", 4),
                                            ("20", 20), (" 21 ", 21), ("20x", 20), ("+19", 19), ("31", 30),
                                            ("30", 30)])
def test_effective_follows_openblas_rules(value, expected):
    assert _blasenv.effective(value) == expected


SPIN = """
import json, time
{first}
import numpy as np
from threadpoolctl import threadpool_info
blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
a = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
for _ in range(3):
    a @ a
a @ a  # uses every BLAS thread; then the process sleeps
t0 = time.process_time()
time.sleep(0.3)
from gradir.backends.cpu.kernels import parallel
print(json.dumps([time.process_time() - t0, blas, parallel.blas_idle_threads_sleep()]))
"""


def test_blas_threads_stop_spinning_soon_after_a_call():
    """CPU time the process burns in 0.3 s of sleep right after a multi-threaded GEMM: OpenBLAS's
    default spin burns ~0.1 s of a core (measured, also checked here); with gradir imported
    first it is nearly nothing.  Wherever gradir says BLAS's threads sleep soon, they do."""
    cpu, blas, sleeps = run(SPIN.format(first="import gradir"))
    if sleeps:  # the claim the LSTM kernels' own two threads rely on
        assert cpu < 0.03, cpu
    threaded_openblas = bool(blas) and all(i["internal_api"] == "openblas" and i["num_threads"] >= 2 for i in blas)
    # NumPy's wheels bundle a pthreads OpenBLAS: there gradir must make the claim, and without
    # it the threads must be seen to spin (the mechanism the setting turns off)
    assert sleeps or not threaded_openblas, blas
    if threaded_openblas:
        default_cpu, _, default_sleeps = run(SPIN.format(first=""))
        assert default_cpu > 0.05 and not default_sleeps, default_cpu


def test_idle_sleep_is_a_process_constant_not_the_limit_held_at_the_first_ask():
    """Asked first while BLAS is held to one thread (as the runtime holds it beside other BLAS
    ops), the answer is still about how OpenBLAS's threads behave when they do run."""
    code = "import numpy; from threadpoolctl import threadpool_limits; import gradir\n"
    code += "with threadpool_limits(1): " + REPORT
    assert run(code)[2] is False
    assert run(code, **{VAR: "20"})[2] is True
