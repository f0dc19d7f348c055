"""Comments and blank lines: kept by parse and the printer (``gradir fmt``), moved with their statements."""

from __future__ import annotations

import glob
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradir
from gradir import Graph
from gradir.text.syntax import _statements
from gradir.ir.trivia import comment_of
from strategies import commented_texts, graphs
from test_syntax import _same

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORWARD = sorted(glob.glob(os.path.join(ROOT, "samples", "*_forward.gir")))


def fmt(text: str) -> str:
    return gradir.parse(text).to_text()


def _events(text: str) -> list[tuple[str, str]]:
    """Printed text as ("stmt", code) | ("comment", text) | ("blank", "") (no '#' in its code)."""
    out = []
    for line in text.split("\n")[:-1]:
        code, hash_, comment = line.partition("#")
        if code:
            out.append(("stmt", code.rstrip()))
        if hash_:
            out.append(("comment", hash_ + comment))
        if not line:
            out.append(("blank", ""))
    return out


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_commented_files_keep_every_comment_in_place(data):
    g: Graph = data.draw(graphs(max_ops=4))
    text, kept = data.draw(commented_texts(g))
    g2 = gradir.parse(text)
    assert g2 == g  # comments are not part of the graph
    printed = g2.to_text()
    assert _events(printed) == kept  # every comment, with its statement, in order; blank runs as one
    assert not printed.startswith("\n") and printed.endswith("\n") and not printed.endswith("\n\n")
    assert fmt(printed) == printed  # idempotent
    assert _same(_statements(text)[0], _statements(text, fast=False)[0])


EXAMPLE = """

   # lead 1
# lead 2


input t0 : Float32 [2]   # in0
output t1   # out A
  # before t1


t1 = Relu(t0)  #   relu   \t
# before out2
output t2 # out B
input t5 : Float32 [2]
t2 = Neg(t1) # neg
# footer 1

# footer 2


"""

EXAMPLE_FMT = """# lead 1
# lead 2

input t0 : Float32 [2]  # in0
input t5 : Float32 [2]
# before t1

t1 = Relu(t0) : Float32 [2]  #   relu
t2 = Neg(t1) : Float32 [2]   # neg
# before out2
# out B
output t1, t2  # out A
# footer 1

# footer 2
"""


def test_fmt_moves_comments_with_their_statements():
    """Inputs print before ops and all outputs as one line; every comment goes along, in order."""
    assert fmt(EXAMPLE) == EXAMPLE_FMT
    assert fmt(EXAMPLE.replace("\n", "\r\n")) == EXAMPLE_FMT
    assert fmt(EXAMPLE_FMT) == EXAMPLE_FMT


def test_trailing_comments_align_in_runs():
    """gofmt's rule: consecutive commented lines align two columns after the longest; a line
    without a trailing comment ends the run, and so does a line 2.5 times longer or shorter."""
    text = ("input t0 : Float32 [2]      # x\n"
            "input t1 : Float32 [2, 3]  # y\n"
            "t2 = Relu(t0) # relu\n"
            "t3 = Neg(t0)\n"
            "t4 = Neg(t2)    # alone\n"
            "     # a comment line ends a run too\n"
            "t5 = Tanh(t1) # a\n"
            "t6 = Sum(t5, t5, t5, t5, t5, t5, t5, t5, t5, t5, t5, t5, t5, t5) # 2.5 times as long: a new run\n"
            "t7 = Sum(t6, t6, t6, t6, t6, t6, t6, t6, t6, t6, t6, t6) # joins it\n"
            "t8 = Neg(t7) # much shorter: a new run\n"
            "output t8\n")
    assert fmt(text) == (
        "input t0 : Float32 [2]       # x\n"
        "input t1 : Float32 [2, 3]    # y\n"
        "t2 = Relu(t0) : Float32 [2]  # relu\n"
        "t3 = Neg(t0) : Float32 [2]\n"
        "t4 = Neg(t2) : Float32 [2]  # alone\n"
        "# a comment line ends a run too\n"
        "t5 = Tanh(t1) : Float32 [2, 3]  # a\n"
        "t6 = Sum(t5, t5, t5, t5, t5, t5, t5, t5, t5, t5, t5, t5, t5, t5) : Float32 [2, 3]  "
        "# 2.5 times as long: a new run\n"
        "t7 = Sum(t6, t6, t6, t6, t6, t6, t6, t6, t6, t6, t6, t6) : Float32 [2, 3]          # joins it\n"
        "t8 = Neg(t7) : Float32 [2, 3]  # much shorter: a new run\n"
        "output t8\n")


def test_blank_lines_collapse_and_never_start_or_end_the_file():
    text = "\n \n# a\n\n\t\n\ninput t0 : Float32 [2]\n\n\n\noutput t0\n\n\n# end\n\n  \n"
    assert fmt(text) == "# a\n\ninput t0 : Float32 [2]\n\noutput t0\n\n# end\n"
    assert fmt("\n\ninput t0 : Float32 [2]\noutput t0\n\n") == "input t0 : Float32 [2]\noutput t0\n"
    # a statement that moves to the top leaves its blank line behind; output lines that merge keep one
    assert fmt("output t1\n\ninput t0 : Float32 [2]\nt1 = Relu(t0)\n") == \
        "input t0 : Float32 [2]\nt1 = Relu(t0) : Float32 [2]\noutput t1\n"
    assert fmt("input t0 : Float32 [2]\n\noutput t0\nt1 = Neg(t0)\n\n\noutput t1\n") == \
        "input t0 : Float32 [2]\nt1 = Neg(t0) : Float32 [2]\n\noutput t0, t1\n"


def test_several_output_lines_keep_all_their_comments():
    """They print as one line, after the first one's leading lines and before its trailing comment;
    each later one's leading lines and trailing comment (now a comment line) follow, in file order."""
    text = ("input t0 : Float32 [2]\n# first\noutput t0  # A\nt1 = Neg(t0)\n\n# second\noutput t1  # B\n"
            "# third\nt2 = Neg(t1)\n# fourth\noutput t2 # C\n")
    assert fmt(text) == ("input t0 : Float32 [2]\nt1 = Neg(t0) : Float32 [2]\n# third\nt2 = Neg(t1) : Float32 [2]\n"
                         "# first\n\n# second\n# B\n# fourth\n# C\noutput t0, t1, t2  # A\n")


@pytest.mark.parametrize("line,comment", [
    ("t1 = Relu(t0)", None),
    ("t1 = Relu(t0)# c", "# c"),
    ("   #  just a comment  \t", "#  just a comment"),
    ('t1 = X(t0, s="a#b")  # c "d" # e', '# c "d" # e'),
    ('t1 = X(t0, s="q\\"#")', None),  # an escaped quote does not end the string
    ('t1 = X(t0, s="a\\\\")#c', "#c"),  # an escaped backslash does
    ('t1 = X(t0, s="open #', None),  # an unterminated string: a syntax error, not a comment
])
def test_a_comment_starts_at_the_first_hash_outside_a_string(line, comment):
    assert comment_of(line) == comment


def test_hash_inside_a_string_attribute_is_not_a_comment():
    text = ('input t0 : Float32 [1, 1, 1]\ninput t1 : Float32 [1, 4, 1]\n'
            't2, t3, t4, t5, t6 = LSTMTraining(t0, t1, t1, hidden_size=1, direction="#x")  # d\noutput t2\n')
    g = gradir.parse(text, verify=False)
    assert g.ops[0].attrs["direction"] == "#x"
    assert g.to_text().endswith('hidden_size=1, direction="#x")  # d\noutput t2\n')


def test_comments_change_neither_the_graph_nor_error_locations():
    plain = "input t0 : Float32 [2]\nt1 = Relu(t0)\noutput t1\n"
    commented = "# c\n\n  # d\ninput t0 : Float32 [2]  # x\n\nt1 = Relu(t0) # y\noutput t1\n# z\n"
    assert gradir.parse(commented) == gradir.parse(plain)
    assert gradir.parse(plain).trivia is None  # nothing to keep: printed as before
    with pytest.raises(gradir.VerifyError) as e:
        gradir.parse(commented.replace("Relu(t0)", "Relu(t9)"), "c.gir")
    assert str(e.value).startswith("c.gir:6:11: error: t9 is not defined\n    t1 = Relu(t9) # y\n")


@pytest.mark.parametrize("path", FORWARD + [None], ids=lambda p: os.path.basename(p) if p else "unnamed")
def test_derived_files_are_canonical(path):
    """``gradir grad`` writes its header comment, then canonical text: ``fmt`` leaves the file alone."""
    from gradir.autodiff.driver import grad_text
    g = gradir.load(path) if path else gradir.parse("input t0 : Float32 [2]\nt1 = Tanh(t0)\noutput t1\n")
    text = grad_text(g)
    assert text.startswith("# Backward (vector-Jacobian) graph of ")
    assert fmt(text) == text
