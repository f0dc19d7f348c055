"""``python -m gradir``: the ``gradir`` command line, for where the console script is not on PATH."""

import sys

from gradir.cli.main import main

if __name__ == "__main__":  # pragma: no cover (run as a module)
    sys.exit(main())
