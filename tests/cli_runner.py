"""Running the command line inside a test: ``run_cli(argv, capsys) -> (exit code, stdout, stderr)``, and a
small labelled forward graph several command-line tests share."""

from __future__ import annotations

from gradir.cli.main import main


def run_cli(argv, capsys) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


LABELLED_FWD = ('graph f\ninput t0 "x" : Float64 [3]\ninput t1 "w" : Float64 [3]\nt2 = Mul(t0, t1) : Float64 [3]\n'
                't3 = Tanh(t2) : Float64 [3]\noutput t3 "y", t2 "pre"\n')
