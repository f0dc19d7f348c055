"""The ``gradir`` console script's entry point, outside the ``gradir`` package.

Importing ``gradir`` loads NumPy, numba and SciPy (about 0.3 s).  A Ctrl-C in that time
would print a Python traceback, because the package is imported before any of its code
can catch anything; here the import itself is inside the ``try``.
"""

import sys


def main() -> int:
    try:
        from gradir.cli.main import main as gradir_main
    except KeyboardInterrupt:
        sys.stderr.write("gradir: interrupted\n")
        return 130
    return gradir_main()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
