"""Fuzzing export_onnx and the round trip back through import_onnx (machinery: tests/fuzzing.py).

For random valid graphs (``strategies.graphs``: every op, both float dtypes, ``?`` dims) with random labels
(odd ones: unicode, quotes, names like ``t0x``; and names the exporter itself generates, ``shape__1``,
``axes__2``), ``export_onnx`` lets only ``GradirError`` escape, within ``API_SECONDS``, and when it exports,
``import_onnx`` gives back a graph that computes the same outputs, bit for bit, under the same keys.
Budget: ``GRADIR_FUZZ_BUDGET`` as in test_fuzz.py (unset: a small fixed number of examples,
derandomized); docs/fuzzing.md.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import gradir
from gradir.backends.cpu.kernels import jit
from gradir.ir.labels import input_key, output_labels_of
from gradir.interop.onnx import export_onnx, import_onnx
from gradir.cli.run import demo_inputs
from fuzzing import API_SECONDS, RUN_ELEMENTS, campaign, examples, fuzz_settings, time_limit, total_elements
from strategies import graphs

GENERATED = st.sampled_from(["shape__1", "axes__1", "axes__2", "factor__3", "const__1", "summed__2", "t0",
                             "Identity_t1", "shape__10"])


@st.composite
def labelled_graphs(draw) -> gradir.Graph:
    """A random graph whose labels are odd ones, or names the exporter generates (never another value's)."""
    g = draw(graphs(max_ops=5, labels=draw(st.sampled_from(["odd", "plain"]))))
    names = set(g.types)
    taken = {i.label for i in g.inputs} | set(output_labels_of(g))
    for i in g.inputs:
        lb = draw(GENERATED)
        if i.label is None and lb not in taken and lb not in names and draw(st.booleans()):
            i.label = lb
            taken.add(lb)
    try:
        return g.validate()
    except gradir.GradirError:
        return draw(graphs(max_ops=3))


@fuzz_settings(examples(40))
@given(labelled_graphs(), st.booleans(), st.integers(0, 3))
def _round_trip(g: gradir.Graph, custom: bool, seed: int) -> None:
    with time_limit(API_SECONDS, "export_onnx"):
        try:
            model = export_onnx(g, custom_domain=custom)
        except gradir.GradirError:
            assert not custom, "with custom_domain=True every valid graph exports"
            return
    with time_limit(API_SECONDS, "import_onnx"):
        back = import_onnx(model).graph
    assert [input_key(i) for i in back.inputs] == [input_key(i) for i in g.inputs]
    if total_elements(g) > RUN_ELEMENTS // 16:
        return
    ins = demo_inputs(g, seed)
    feed = {input_key(i): ins[i.name] for i in g.inputs}
    with time_limit(API_SECONDS, "run both"):
        try:
            want = gradir.compile(g, threads=1).run(feed)
        except gradir.InputError:  # `?` dims drawn apart
            return
        got = gradir.compile(back, threads=1).run(feed)
    assert set(got) == set(want)
    for k, w in want.items():
        assert got[k].dtype == w.dtype and np.asarray(got[k]).tobytes() == np.asarray(w).tobytes(), k


def test_export_then_import_round_trips_random_graphs():
    with jit.disabled():
        campaign(_round_trip, 1.0)
