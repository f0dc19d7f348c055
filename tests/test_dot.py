"""``gradir dot`` / ``gradir.to_dot``: valid DOT for every sample, what the picture says
(kinds of node, labels, the compiled schedule), escaping, and rendering with Graphviz."""

from __future__ import annotations

import glob
import os
import re
import shutil
import stat
import sys
import xml.etree.ElementTree as ET
from collections import Counter

import pydot
import pytest

import gradir
from gradir import DType, Graph, TensorType, load, parse, to_dot
from gradir.cli.main import main
from gradir.tools.dot import render
from gradir.ops.fused import FusedElementwiseOp
from complexity import grows_linearly
from gradir.errors import RenderError
from gradir.ir.op import OPS, Attr, Op, Operand
from gradir.transforms.passes.pipeline import Program, run_passes
from gradir.transforms.schedule import build_plan
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "samples", "*.gir")))
CELL = os.path.join(ROOT, "samples", "lstm_cell_backward.gir")
MLP_GRAD = os.path.join(ROOT, "samples", "mlp_forward.grad.gir")
HAVE_DOT = shutil.which("dot") is not None
NO_DOT = "Graphviz's dot is not installed (apt-get install graphviz); rendering is not tested here"


def parse_dot(text: str) -> pydot.Dot:
    graphs = pydot.graph_from_dot_data(text)
    assert graphs and len(graphs) == 1, "pydot could not parse the DOT text"
    return graphs[0]


def nodes(g) -> list:
    """Every node statement, in clusters too (not the node/edge/graph default statements)."""
    out = [n for n in g.get_nodes() if n.get_name() not in ("node", "edge", "graph")]
    for sg in g.get_subgraphs():
        out += nodes(sg)
    return out


def edges(g) -> list:
    out = list(g.get_edges())
    for sg in g.get_subgraphs():
        out += edges(sg)
    return out


def label(item) -> str:
    return item.get_label() or ""


def text_of(html: str) -> str:
    """The visible text of an HTML-like label: tags dropped, <br/> as newlines, entities decoded, and
    Graphviz's own backslash escapes undone (it reads them in HTML labels too)."""
    import html as h
    body = html[1:-1] if html.startswith("<") and html.endswith(">") else html
    return re.sub(r"\\(.)", r"\1", h.unescape(re.sub(r"<[^>]*>", "", body.replace("<br/>", "\n"))))


def graph_label(g) -> str:
    """The picture's title: the label of the top-level ``graph [...]`` statement."""
    return text_of(next(n for n in g.get_nodes() if n.get_name() == "graph").get("label"))


def edge_labels(g) -> Counter:
    return Counter(label(e).strip('"') for e in edges(g) if label(e))


def expected_edge_labels(graph: Graph, ops, outputs, types) -> Counter:
    want = Counter()
    for op in ops:
        for v in op.operands:
            if v is not None:
                want[f"{v} : {types[v]}"] += 1
    for v in outputs:
        want[f"{v} : {types[v]}"] += 1
    return want


def compiled(graph: Graph, disable=()):
    program = Program(graph)
    plan = build_plan(program, run_passes(program, disable=list(disable)))
    return program, plan


# -- the source graph ---------------------------------------------------------------------
@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_every_sample_gives_dot_that_parses_and_matches_the_graph(path):
    graph = load(path)
    g = parse_dot(to_dot(graph))
    ns = nodes(g)
    assert len(ns) == len(graph.inputs) + len(graph.ops) + len(graph.outputs)
    shapes = Counter(n.get("shape") for n in ns)
    assert shapes["ellipse"] == len(graph.inputs) + len(graph.outputs)
    assert shapes["box"] == len(graph.ops)
    assert sum(1 for n in ns if n.get("peripheries") == "2") == len(graph.outputs)
    # one edge per use of a value, each labelled with the value's name and type
    assert edge_labels(g) == expected_edge_labels(graph, graph.ops, graph.outputs, graph.types)
    assert len(edges(g)) == sum(edge_labels(g).values())
    # every op box names its op and its source line
    boxes = [text_of(label(n)) for n in ns if n.get("shape") == "box"]
    for op, text in zip(graph.ops, boxes):
        assert text.split("\n")[0] == op.op_name
        assert f"line {op.loc.line.line}" in text


@pytest.mark.parametrize("path", SAMPLES, ids=os.path.basename)
def test_every_sample_plan_parses_and_matches_the_schedule(path):
    graph = load(path)
    program, plan = compiled(graph)
    text = to_dot(graph, plan=True)
    g = parse_dot(text)
    steps = re.findall(r"<b>#(\d+)  (\w+)</b>", text)  # in the order the DOT text gives them
    assert steps == [(str(st.index), st.op.op_name) for st in plan.steps]  # numbered, in schedule order
    # the source ops a step replaced: a fused element-wise loop's members, intermediates included
    replaced = [{r for m in st.op.members for r in m.results} if isinstance(st.op, FusedElementwiseOp)
                else set(st.op.results) for st in plan.steps]
    sources = [len({id(o) for o in graph.ops if set(o.results) & r}) for r in replaced]
    members = sum(n for n in sources if n > 1)  # a fused step also draws the ops it replaced
    assert len(nodes(g)) == len(graph.inputs) + len(plan.steps) + members + len(graph.outputs)
    want = expected_edge_labels(graph, [st.op for st in plan.steps], plan.live_outputs, plan.types)
    assert edge_labels(g) == want


def test_labels_show_non_default_attributes_only():
    graph = parse("graph g\ninput t0 : Float32 [2, 3]\ninput t1 : Float32 [2, 3]\n"
                  "t2 = Softmax(t0)\nt3 = SoftmaxGrad_13(t1, t2, axis=0)\nt4 = Transpose(t3, perm=[1, 0])\n"
                  "output t4\n")
    ops = [text_of(label(n)) for n in nodes(parse_dot(to_dot(graph))) if n.get("shape") == "box"]
    assert ops[0] == "Softmax\nline 4"  # axis=-1 is the default: not shown
    assert ops[1] == "SoftmaxGrad_13\naxis=0\nline 5"
    assert ops[2] == "Transpose\nperm=[1, 0]\nline 6"


def test_inputs_outputs_and_backward_ops_look_different():
    g = parse_dot(to_dot(load(MLP_GRAD)))
    style = {text_of(label(n)).split("\n")[0]: (n.get("shape"), n.get("fillcolor")) for n in nodes(g)}
    kinds = {style["t0"], style["output t21"], style["MatMul"], style["ReluGrad"]}
    assert len(kinds) == 4, style  # input, output, forward op, backward op: four looks


def test_unused_results_are_named():
    g = parse_dot(to_dot(load(os.path.join(ROOT, "samples", "lstm_bidirectional.gir"))))
    texts = [text_of(label(n)) for n in nodes(g)]
    assert any(t.startswith("LSTMTraining\n") and "unused: t8, t9" in t for t in texts)
    assert any(t.startswith("LSTMGrad\n") and "unused: t16, t17" in t for t in texts)


# -- the compiled graph -------------------------------------------------------------------
def test_plan_draws_the_fused_cell_gradients_as_a_cluster():
    graph = load(CELL)
    g = parse_dot(to_dot(graph, plan=True))
    clusters = [sg for sg in g.get_subgraphs() if sg.get_name().startswith("cluster_")]
    assert len(clusters) == 1
    inside = [text_of(label(n)) for n in nodes(clusters[0])]
    assert inside[0].startswith("#1  GradLSTMCellInputFused\ninput_indices=[0, 1, 2, 3, 4, 5]\nhidden_size=32")
    members = inside[1:]
    assert [m.split("\n")[:2] for m in members] == [["GradLSTMCellInput", f"input_index={k}"] for k in range(6)]
    assert [m.split("\n")[-1] for m in members] == [f"line {15 + k}" for k in range(6)]  # their source lines
    assert graph_label(clusters[0]) == "fused: one kernel for 6 GradLSTMCellInput ops"
    # each gradient leaves the member that computes it
    by_id = {n.get_name(): text_of(label(n)) for n in nodes(g)}
    for e in edges(g):
        lab = label(e).strip('"')
        if lab.startswith("t1") and lab[:3] in ("t10", "t11", "t12", "t13", "t14", "t15"):
            k = int(lab[1:3]) - 10
            assert by_id[e.get_source()].split("\n")[1] == f"input_index={k}"
    text = graph_label(g)
    assert "compiled: 2 steps" in text and "fuse-lstm-cell-grads: fused 6 ops into 1" in text


def test_plan_with_fusion_disabled_has_no_cluster(capsys):
    assert main(["dot", "--plan", "--disable", "fuse-lstm-cell-grads", CELL]) == 0
    g = parse_dot(capsys.readouterr().out)
    assert not g.get_subgraphs()
    steps = [text_of(label(n)).split("\n")[0] for n in nodes(g) if text_of(label(n)).startswith("#")]
    assert steps == ["#0  LSTMCell"] + [f"#{k}  GradLSTMCellInput" for k in range(1, 7)]


def test_plan_annotates_in_place_reuse_and_frees():
    graph = load(MLP_GRAD)
    _, plan = compiled(graph)
    g = parse_dot(to_dot(graph, plan=True))
    texts = {text_of(label(n)).split("\n")[0]: text_of(label(n)) for n in nodes(g)}
    for st in plan.steps:
        text = texts[f"#{st.index}  {st.op.op_name}"]
        for r, o in st.inplace.items():
            assert f"{st.results[r]} reuses {st.operands[o]}'s buffer" in text
        freed = re.findall(r"frees ([^\n]*(?:\n  [^\n]*)*)", text)
        assert [v for part in freed for v in re.split(r"[,\s]+", part) if v] == st.free_after
    assert "t6 reuses t5's buffer" in texts["#1  Add"] and "frees t5" in texts["#1  Add"]
    # the donated operand's edge is drawn apart
    bold = {label(e).strip('"') for e in edges(g) if e.get("penwidth") == "2"}
    assert bold == {f"{st.operands[o]} : {plan.types[st.operands[o]]}" for st in plan.steps for o in st.inplace.values()}
    assert "planned peak 9.14 KiB, naive total 14.4 KiB" in graph_label(g)  # no transposed copies


def test_plan_shows_outputs_merged_by_cse():
    graph = parse("input t0 : Float32 [4]\nt1 = Relu(t0)\nt2 = Relu(t0)\noutput t1, t2\n")
    g = parse_dot(to_dot(graph, plan=True))
    outs = [text_of(label(n)) for n in nodes(g) if n.get("peripheries") == "2"]
    assert outs == ["output t1", "output t2\ncomputed by t1"]
    assert edge_labels(g) == Counter({"t0 : Float32 [4]": 1, "t1 : Float32 [4]": 2})


# -- escaping and size ------------------------------------------------------------------------
@pytest.fixture
def note_op():
    """A test-only op with free-text attributes (no shipped op takes arbitrary strings)."""
    class DotNoteTestOp(Op):
        """Test-only: passes X through; carries free text."""
        OPERANDS = (Operand("X"),)
        ATTRS = (Attr("note", "str", ""), Attr("tags", "strs", ()))

        def infer(self, ctx):
            return [ctx.type(0)]
    try:
        yield DotNoteTestOp
    finally:
        del OPS["DotNoteTest"]


ODD = 'say "hi" \\ <b>&amp;</b> é ✓ \\N \\n'


def odd_graph(op_cls, note=ODD, name='odd "name" \\ <x>'):
    t = TensorType(DType.Float32, (2,))
    return Graph([("t0", t)], [op_cls(["t1"], ["t0"], {"note": note, "tags": ["a\tb", "c\x01"]})], ["t1"],
                 name=name)


def test_odd_strings_are_escaped(note_op):
    from gradir.ir.op import format_attr_value
    text = to_dot(odd_graph(note_op))
    g = parse_dot(text)
    assert g.get_name() == '"odd \\"name\\" \\\\ <x>"'
    box = text_of(label(next(n for n in nodes(g) if n.get("shape") == "box")))
    assert box.split("\n")[1] == f"note={format_attr_value(ODD)}"
    assert box.split("\n")[2] == 'tags=["a\\tb", "c\\u0001"]'  # control characters stay visible
    assert all(c.isprintable() or c == "\n" for c in text)


@pytest.mark.skipif(not HAVE_DOT, reason=NO_DOT)
def test_odd_strings_survive_rendering(note_op):
    from gradir.ir.op import format_attr_value
    svg = render(to_dot(odd_graph(note_op)), "svg")
    shown = [t.text for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")]
    assert f"note={format_attr_value(ODD)}" in shown
    assert 'graph odd "name" \\ <x>' in shown  # the title
    assert "DotNoteTest" in shown


def test_long_attributes_are_clipped(note_op):
    box = [text_of(label(n)) for n in nodes(parse_dot(to_dot(odd_graph(note_op, note="x" * 500))))
           if n.get("shape") == "box"][0]
    line = box.split("\n")[1]
    assert line.startswith('note="xxx') and line.endswith("\u2026") and len(line) == 48


def test_large_graph_stays_linear_and_valid():
    n = 3000
    text = "input t0 : Float32 [4]\n" + "".join(f"t{k + 1} = Relu(t{k})\n" for k in range(n)) + f"output t{n}\n"
    graph = parse(text)
    dot = to_dot(graph)
    assert dot.count(" -> ") == n + 1

    def chain(k: int):
        g = parse("input t0 : Float32 [4]\n" + "".join(f"t{j + 1} = Relu(t{j})\n" for j in range(k)) + f"output t{k}\n")
        return lambda: to_dot(g)
    grows_linearly(chain, 300)  # lines executed, not seconds
    small = parse("input t0 : Float32 [4]\n" + "".join(f"t{k + 1} = Relu(t{k})\n" for k in range(200)) +
                  "output t200\n")
    assert len(nodes(parse_dot(to_dot(small, plan=True)))) == 202


def test_api():
    assert gradir.to_dot is to_dot
    with pytest.raises(TypeError, match="takes a Graph"):
        to_dot("input t0 : Float32 [2]")
    with pytest.raises(ValueError, match="only applies with plan=True"):
        to_dot(load(CELL), disable=["cse"])
    with pytest.raises(gradir.VerifyError):
        to_dot(Graph([("t0", TensorType(DType.Float32, (2,)))], [OPS["Relu"](["t1"], ["t9"])], ["t1"]))


# -- the command line ---------------------------------------------------------------------------
def test_cli_writes_stdout_or_file(tmp_path, capsys):
    path = os.path.join(ROOT, "samples", "mlp_forward.gir")
    assert main(["dot", path]) == 0
    out = capsys.readouterr().out
    assert out == to_dot(load(path))
    dest = tmp_path / "g.dot"
    assert main(["dot", path, "-o", str(dest)]) == 0
    assert capsys.readouterr().out == ""
    assert dest.read_text(encoding="utf-8") == out


def test_cli_errors(capsys, tmp_path):
    assert main(["dot", "--disable", "cse", CELL]) == 2
    assert "--disable only applies with --plan" in capsys.readouterr().err
    assert main(["dot", "--plan", "--disable", "cse,nope", CELL]) == 2
    assert "unknown pass 'nope'" in capsys.readouterr().err
    bad = tmp_path / "bad.gir"
    bad.write_text("input t0 : Float32 [2]\nt1 = Relu(t9)\noutput t1\n")
    assert main(["dot", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2:11: error: t9 is not defined" in err and "Traceback" not in err


def test_help_has_a_description_and_examples(capsys):
    assert main(["dot", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Graphviz" in out and "examples:\n  gradir dot samples/mlp_forward.gir --svg" in out


def test_missing_dot_says_how_to_install_it_and_still_writes_the_dot_text(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    dest, svg = tmp_path / "g.dot", tmp_path / "g.svg"
    assert main(["dot", CELL, "-o", str(dest), "--svg", str(svg)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gradir: error: rendering needs Graphviz's 'dot' program (not found on PATH); install it "
                          "(Debian/Ubuntu: apt-get install graphviz;")
    assert f"the DOT text was written to {dest}" in err and "Traceback" not in err
    assert dest.read_text(encoding="utf-8") == to_dot(load(CELL))
    assert not svg.exists()
    assert main(["dot", CELL, "--png", str(tmp_path / "g.png")]) == 1
    assert "or use -o OUT.dot to write the DOT text" in capsys.readouterr().err


def fake_dot(tmp_path, body: str) -> str:
    d = tmp_path / "fakebin"
    d.mkdir()
    exe = d / "dot"
    exe.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(d)


@pytest.mark.skipif(os.name != "posix", reason="the stand-in dot is a POSIX script")
def test_failing_dot_shows_its_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", fake_dot(tmp_path, "sys.stdin.read(); print('Error: layout exploded', "
                                                  "file=sys.stderr); sys.exit(3)"))
    out = tmp_path / "g.svg"
    assert main(["dot", CELL, "--svg", str(out)]) == 1
    err = capsys.readouterr().err
    assert "gradir: error: Graphviz's dot failed (exit 3) rendering SVG:\nError: layout exploded" in err
    assert not out.exists()


@pytest.mark.skipif(os.name != "posix", reason="the stand-in dot is a POSIX script")
def test_slow_dot_times_out(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_dot(tmp_path, "time.sleep(30)"))
    with pytest.raises(RenderError, match="did not finish within 0.5 s"):
        render("digraph { a }", "svg", timeout=0.5)


@pytest.mark.skipif(not HAVE_DOT, reason=NO_DOT)
def test_renders_svg_and_png(tmp_path, capsys):
    svg, png, dot = tmp_path / "c.svg", tmp_path / "c.png", tmp_path / "c.dot"
    assert main(["dot", "--plan", CELL, "--svg", str(svg), "--png", str(png), "-o", str(dot)]) == 0
    assert capsys.readouterr().out == ""
    root = ET.fromstring(svg.read_bytes())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    shown = "".join(root.itertext())
    assert "GradLSTMCellInputFused" in shown and "#0" in shown
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert dot.read_text(encoding="utf-8") == to_dot(load(CELL), plan=True)


def test_the_readme_picture_is_current():
    """docs/images/mlp_backward-plan.svg (rendered once with `gradir dot --plan samples/mlp_backward.gir
    --svg ...`) shows exactly the text that the DOT of today's plan has."""
    svg = ET.parse(os.path.join(ROOT, "docs", "images", "mlp_backward-plan.svg"))
    shown = Counter(t.text.replace("\xa0", " ") for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    g = parse_dot(to_dot(load(os.path.join(ROOT, "samples", "mlp_backward.gir")), plan=True))
    want = Counter(graph_label(g).split("\n"))
    for n in nodes(g):
        want.update(text_of(label(n)).split("\n"))
    want.update(label(e).strip('"') for e in edges(g))
    assert shown == want, "re-render the picture: gradir dot --plan samples/mlp_backward.gir --svg ..."


GIR = "input t0 : Float32 [2, 3]\ninput t1 : Float32 [3]\nt2 = Add(t0, t1)\nt3 = Tanh(t2)\noutput t3\n"


def test_graph_of_a_0d_array_and_to_dot_argument_checks():
    """``Graph(np.array(1))`` iterated a 0-d array (TypeError); ``to_dot(g, plan=True, disable=1)``
    iterated an int and ``disable=[{}]`` hashed a dict; ``plan=np.ones(2)`` had no truth value."""
    with pytest.raises(gradir.ArgumentError, match=r"Graph inputs must be a list of GraphInput .*, got array\(1\)"):
        gradir.Graph(np.array(1))
    g = gradir.parse(GIR)
    for disable, msg in [(1, "to_dot\\(\\): disable must be a list of pass names, got int"),
                         ([{}], "to_dot\\(\\): disable must be a list of pass names, got \\{\\} in it"),
                         (["nope"], "unknown pass 'nope'")]:
        with pytest.raises(gradir.ArgumentError, match=msg):
            gradir.to_dot(g, plan=True, disable=disable)
    with pytest.raises(gradir.ArgumentError, match="to_dot\\(\\): plan must be True or False, got array"):
        gradir.to_dot(g, plan=np.ones(2))
    text = gradir.to_dot(g, plan=True, disable="cse, dce")  # a comma-separated str, as compile takes
    assert text == gradir.to_dot(g, plan=True, disable=["cse", "dce"]) and "cse:" not in text
