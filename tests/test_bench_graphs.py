"""The graphs of benchmarks/bench_graphs.py at tiny sizes: gradir's derived gradients against a
reference, so that the benchmark's builders cannot rot.

The reference is PyTorch eager autograd where torch is importable (it is in the ``bench`` extra,
not the test extra), and always float64 finite differences (``gradir.gradcheck``, on the forward
graph at the case's own inputs).  JAX's version of each graph is checked too where JAX is
importable."""

import os
import sys

import numpy as np
import pytest

import gradir

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import graph_cases as gc  # noqa: E402

KEYS = list(gc.BUILDERS)


def _gradir_gradients(case: gc.Case) -> list:
    fwd = gradir.parse(case.text)
    bwd = gradir.grad(fwd, wrt=case.wrt)
    feeds = dict(case.inputs)
    cot = bwd.inputs[len(fwd.inputs):]
    assert len(cot) == len(case.cotangents)
    for inp, ct in zip(cot, case.cotangents):
        assert inp.type.shape == ct.shape, (case.key, inp, ct.shape)
        feeds[inp.name] = ct
    return list(gradir.compile(bwd, threads=1).run(feeds).values())


def test_the_nine_graphs_at_the_issues_sizes():
    assert KEYS == ["lstm", "mlp", "chain", "loss", "branches", "gpt", "gru", "cnn", "dwsep"]
    for sizes in (gc.LSTM_SIZES, gc.MLP_SIZES, gc.CHAIN_SIZES, gc.LOSS_SIZES, gc.BRANCH_SIZES, gc.GPT_SIZES, gc.GRU_SIZES,
                  gc.CNN_SIZES, gc.DWSEP_SIZES):
        assert set(sizes) == {"tiny", "quick", "full"}
    assert gc.CNN_SIZES["full"] == (64, 3, 32, 64, 10)  # batch, input channels, side, channels, classes
    cnn = gradir.parse(gc.build("cnn", "tiny").text)
    assert [op.op_name for op in cnn.ops].count("Conv") == 2 and "MaxPool" in {op.op_name for op in cnn.ops}
    dwsep = gradir.parse(gc.build("dwsep", "tiny").text)
    assert [op.attrs["group"] for op in dwsep.ops if op.op_name == "Conv"] == [gc.DWSEP_SIZES["tiny"][1], 1]
    assert gc.GPT_SIZES["full"] == (8, 256, 512, 8, 2048, 8192)  # B, T, C, heads, MLP, vocabulary
    assert gc.LSTM_SIZES["full"] == (100, 64, 256, 256, 512)  # S, B, I, H, classes
    assert gc.GRU_SIZES["full"] == (100, 64, 256, 256, 512)  # S, B, I, H, classes (issue #32)
    assert gc.MLP_SIZES["full"] == (512, 1024, 4096, 1024)
    assert gc.CHAIN_SIZES["full"] == (2048, 2048)
    chain = gradir.parse(gc.build("chain", "tiny").text)
    assert len(chain.ops) == 8 and all(op.ELEMENTWISE for op in chain.ops)
    case = gc.build("loss", "tiny")
    assert case.cotangents[0].shape == ()  # the loss is a scalar


@pytest.mark.parametrize("key", KEYS)
def test_gradients_against_finite_differences(key):
    case = gc.build(key, "tiny")
    report = gradir.gradcheck(case.text, wrt=case.wrt, inputs=case.inputs)
    assert report.ok, report.table()


@pytest.mark.parametrize("key", KEYS)
def test_gradients_against_pytorch(key):
    torch = None
    if _have("torch"):
        import torch
    case = gc.build(key, "tiny")
    ours = _gradir_gradients(case)
    assert [g.shape for g in ours] == [case.inputs[k].shape for k in case.wrt]
    if torch is None:  # the finite-difference test above is the reference then
        return
    ref = gc.torch_gradients(torch, case)
    assert len(ref) == len(ours)
    for label, a, b in zip(case.wrt_labels, ours, ref):
        assert gc.rel_error(a, b) <= 1e-5, (key, label, gc.rel_error(a, b))


_JAX_CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import gradir, jax, numpy as np
import graph_cases as gc
for key in gc.BUILDERS:
    case = gc.build(key, "tiny")
    f = case.jax(jax)
    others = [case.inputs[k] for k in case.others]
    grads = jax.jit(lambda wrt, cts: jax.vjp(lambda *w: f(*w, *others), *wrt)[1](cts))
    theirs = grads(tuple(case.inputs[k] for k in case.wrt), tuple(case.cotangents))
    fwd = gradir.parse(case.text)
    bwd = gradir.grad(fwd, wrt=case.wrt)
    feeds = dict(case.inputs, **{i.name: c for i, c in zip(bwd.inputs[len(fwd.inputs):], case.cotangents)})
    ours = list(gradir.compile(bwd, threads=1).run(feeds).values())
    for label, a, b in zip(case.wrt_labels, ours, theirs):
        err = gc.rel_error(a, np.asarray(b))
        assert err <= 1e-5, (key, label, err)
print("ok", len(gc.BUILDERS))
"""


def test_jax_versions_match():
    """JAX's version of every graph gives gradir's gradients.  In a child process: JAX's threads
    would make every later fork in this test process (the CLI tests) warn of deadlocks."""
    if not _have("jax"):
        return
    import subprocess
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(here, ".."), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _JAX_CHECK, here], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0 and done.stdout.strip() == f"ok {len(KEYS)}", done.stdout + done.stderr


@pytest.mark.parametrize("gather,layer_norm", [(False, False), (None, None)])
def test_the_gpt_block_in_each_form(gather, layer_norm):
    """The GPT block with the stand-ins (embeddings as an input, LayerNorm from ReduceMean etc.) and with
    whatever of Gather / LayerNormalization is registered: gradir's gradients are PyTorch's where torch
    is importable (else the finite differences above check the default form)."""
    from gpt_case import gpt, registered
    case = gpt("tiny", gather=gather, layer_norm=layer_norm)
    text = gradir.parse(case.text).to_text()
    assert ("Gather(" in text) == (gather is None and registered("Gather"))
    assert ("LayerNormalization(" in text) == (layer_norm is None and registered("LayerNormalization"))
    assert "Softmax(" in text and "SoftmaxCrossEntropyLoss(" in text and "bk" not in case.wrt_labels
    ours = _gradir_gradients(case)
    if not _have("torch"):
        return
    import torch
    for label, a, b in zip(case.wrt_labels, ours, gc.torch_gradients(torch, case)):
        assert gc.rel_error(a, b) <= 1e-5, (label, gc.rel_error(a, b))


def test_the_gpt_block_from_orts_training_graph():
    """ONNX Runtime's training graph of the GPT block (benchmarks/data/gpt_ort_tiny.onnx, written by
    scripts/ort_fixtures/gpt_bench_graph.py) imports, and on gpt_case's own values its gradients are those
    of the graph ``gradir grad`` derives from gpt_case's forward text: the benchmark's second form computes
    the same step.  Every size's file is there and small (parameters are graph inputs)."""
    pytest.importorskip("onnx")
    import bench_graphs
    from gpt_case import ort_graph, registered
    for scale in ("tiny", "quick", "full"):
        assert ort_graph(scale) is not None and os.path.getsize(ort_graph(scale)) < 1 << 20
    if not (registered("Gather") and registered("LayerNormalization")):
        return
    case = gc.build("gpt", "tiny")
    assert case.onnx_graph is not None and case.onnx_graph[0] == ort_graph("tiny")
    run, exe, _ = bench_graphs.imported_impl(case, threads=1)
    assert "GatherGrad" in exe.graph.to_text() and "LayerNormalizationGrad" in exe.graph.to_text()
    theirs = run()
    ours = _gradir_gradients(case)
    assert [a.shape for a in theirs] == [b.shape for b in ours]
    for label, a, b in zip(case.wrt_labels, theirs, ours):
        assert gc.rel_error(a, b) <= 1e-5, (label, gc.rel_error(a, b))


def test_rel_error_sees_a_wrong_gradient():
    a = np.array([1.0, 2.0, 4.0], np.float32)
    assert gc.rel_error(a, a) == 0.0
    assert gc.rel_error(a * np.float32(1.01), a) > 1e-3
    assert gc.rel_error(a[:2], a) == float("inf")


def _have(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


def test_the_benchmark_runs(capsys):
    """bench_graphs.main end to end on the quick element-wise chain (torch.compile and JAX left out)."""
    import bench_graphs
    torch = sys.modules.get("torch")
    saved = torch.get_num_threads() if torch is not None else None
    try:
        assert bench_graphs.main(["--quick", "--graphs", "chain", "--repeats", "1", "--threads", "1",
                                  "--no-compile", "--no-jax"]) == 0
    finally:  # main sets PyTorch's (process-wide) thread count
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(saved or os.cpu_count() or 1)
    out = capsys.readouterr().out
    assert "CPU: " in out and "## element-wise chain on 512 x 512" in out
    assert "heavy steps" in out and "ms alone" in out
    if _have("torch"):
        assert "gradir vs PyTorch eager" in out and "chain: <= 0.5x PyTorch eager" in out
    with pytest.raises(SystemExit):
        bench_graphs.main(["--graphs", "nope"])


def test_the_benchmark_without_torch_or_jax(capsys, monkeypatch):
    """Where PyTorch and JAX are missing, the benchmark says so and times gradir alone."""
    import bench_graphs
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    monkeypatch.setitem(sys.modules, "jax", None)
    assert bench_graphs.main(["--quick", "--graphs", "chain", "--repeats", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "PyTorch missing" in out and "JAX missing" in out
    assert "PyTorch: not installed" in out and "JAX: not installed" in out and "NOT checked" in out
    assert "[ n/a] chain: <= 1.0x torch.compile" in out and "[ n/a] chain: <= 0.5x PyTorch eager" in out
