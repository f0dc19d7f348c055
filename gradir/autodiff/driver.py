"""Reverse-mode autodiff: derive a backward (vector-Jacobian) graph from a forward graph.

``grad(graph, wrt)`` returns a new ``Graph`` whose

* inputs are the forward inputs (same names, same order) followed by one
  cotangent per forward output (same type as that output, in output order);
* outputs are the gradients of ``L = sum_k <cotangent_k, output_k>`` with respect
  to the inputs named in ``wrt`` (default: every floating-point input), in
  ``wrt`` order.

How it works (JAX-style):

1. *Activity analysis.*  An op is differentiated only if it lies on a path from a
   ``wrt`` input to an output; an operand gets a cotangent only if it depends on a
   ``wrt`` input.  Everything else is never emitted.
2. *Rules.*  ``gradient_rule(cls)`` gives each forward op's function
   ``rule(e, op, cts, need) -> cotangents per operand``: hand-written (``RULES``, by op class) or
   derived from the op's ``VJP`` or ``GRADIENT`` (``gradrules.py``).  ``e`` is the
   ``Emitter``, which appends IR ops with fresh names and returns the names;
   ``cts`` holds one cotangent name per result (``None`` is a symbolic zero);
   ``need[i]`` says whether operand ``i`` wants a cotangent (rules may skip work
   for the others and return ``None`` for them).  Rules emit IR ops, never arrays.  A
   cotangent of a result in the op's ``NO_GRADIENT_RESULTS``, or one asked of an operand in its
   ``NO_GRADIENT_OPERANDS``, is an error located at the op (before its rule runs).
3. *Broadcasting is undone centrally*: when a rule returns a cotangent whose shape
   differs from its operand's (or the op broadcasts and the operand has ``?``
   dimensions), the driver inserts one ``ReduceSumTo(ct, operand)``.
4. *Accumulation*: several cotangents of one value are added with one ``Sum``.
5. *Recomputation*: the derived graph only has the forward inputs, so the forward
   ops whose values the backward ops read are copied in front of them (keeping
   their names); the others are left out.  A final dead-code sweep drops anything
   that no requested gradient uses.

Naming is deterministic: forward values keep their names, new values are
numbered upwards from the largest forward name, in emission order.  Deriving the
same graph twice gives identical text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Union

from ..errors import AutodiffError, Diagnostic, shown
from ..ir.graph import Graph, GraphInput
from ..ir.op import Op
from ..ir.labels import label_text
from .gradrules import NO_RULE_REASON, RULES, Emitter, Rule, gradient_rule, rule

__all__ = ["grad", "derive", "Derivation", "RULES", "Emitter", "Rule", "rule", "gradient_rule", "NO_RULE_REASON",
           "AutodiffError", "grad_text", "parse_wrt"]


# ---------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------
@dataclass
class Derivation:
    """What ``derive`` returns: the backward graph and how its names map."""

    graph: Graph
    forward: Graph
    wrt: list[str]  # forward inputs, in gradient (output) order
    cotangents: list[tuple[str, str]]  # (cotangent input, forward output it belongs to)

    def header(self) -> str:
        """A comment block that says what the derived graph's inputs and outputs are."""
        f = self.forward
        name = f"'{f.name}'" if f.name else "a forward graph"
        cots = ", ".join(f"{c} (of {o})" for c, o in self.cotangents)
        grads = ", ".join(f"{g} = d/d{w}" for g, w in zip(self.graph.outputs, self.wrt))
        return (f"# Backward (vector-Jacobian) graph of {name}, derived by `gradir grad`; do not edit.\n"
                f"# Inputs: the forward inputs {', '.join(f.input_names)}, then the cotangents {cots}.\n"
                f"# Outputs: the gradients {grads}.\n")


def parse_wrt(graph: Graph, wrt: Optional[Iterable[str]]) -> list[str]:
    """The input names (``tN``) to differentiate with respect to: ``wrt`` names inputs by ``tN`` or by
    label, as a list or one comma-separated str; ``None`` means every floating-point input."""
    types = {i.name: i.type for i in graph.inputs}
    by_label = {i.label: i.name for i in graph.inputs if i.label is not None}
    if wrt is None:
        names = [i.name for i in graph.inputs if i.type.dtype.is_float]
        if not names:
            raise AutodiffError(Diagnostic(
                "nothing to differentiate: the graph has no floating-point inputs"
                + (f" (its inputs are {', '.join(f'{i.name} {i.type}' for i in graph.inputs)})" if graph.inputs
                   else ""), filename=graph.source.filename if graph.source else None))
        return names
    problems = []
    if isinstance(wrt, str):
        parts = [w.strip() for w in wrt.split(",")]
        if any(not w for w in parts) and any(parts):
            problems.append(f"wrt {shown(wrt)} has an empty entry; write names separated by commas, like t0,t3")
        wrt = [w for w in parts if w]
    from ..errors import ArgumentError
    try:
        names = list(wrt) if isinstance(wrt, Iterable) else None
    except TypeError:  # an Iterable that does not iterate: a 0-d NumPy array
        names = None
    if names is None:
        raise ArgumentError(f"wrt must be a list of input names (or a comma-separated str), got {shown(wrt)}")
    names = [by_label[w] if isinstance(w, str) and w not in types and w in by_label else w for w in names]
    for k, w in enumerate(names):
        if not isinstance(w, str):
            problems.append(f"wrt entries are input names like 't0', got {shown(w)}")
        elif w not in types:
            problems.append(_not_an_input(graph, w))
        elif not types[w].dtype.is_float:
            problems.append(f"wrt: {w} has type {types[w]}; only floating-point inputs have gradients")
        elif w in names[:k]:
            problems.append(f"wrt: {w} is listed twice")
    if not names:
        problems.append("wrt is empty: name at least one input")
    if problems:
        name = graph.source.filename if graph.source else None
        raise AutodiffError([p if isinstance(p, Diagnostic) else Diagnostic(p, filename=name) for p in problems])
    return names


def _not_an_input(graph: Graph, w: str) -> Union[str, Diagnostic]:
    """Why ``w`` (a ``wrt`` entry, neither an input's name nor its label) cannot be differentiated with respect
    to: a value the graph computes is pointed at where it is computed; a name that is nothing gets the
    inputs it may have meant (close matches first, then at most ``SHOWN_NAMES`` of them)."""
    from ..text.names import close_matches, computed_diagnostic, did_you_mean, name_list
    shown_inputs = [i.name if i.label is None else f"{i.name} ({label_text(i.label).strip()})" for i in graph.inputs]
    located = computed_diagnostic(graph, w, "wrt", ", not an input; gradients are with respect to the graph's "
                                  f"inputs, {name_list(shown_inputs)}")
    if located is not None:
        return located
    keys = {i.name: i.name for i in graph.inputs}
    keys.update((i.label, f"{i.label} ({i.name})") for i in graph.inputs if i.label is not None)
    hint = did_you_mean([keys[m] for m in close_matches(w, list(keys))])
    return (f"wrt: the graph has no value {w}, by name or label; {hint + ' ' if hint else ''}"
            f"the graph's inputs are {name_list(shown_inputs)}")


def derive(graph: Union[Graph, str], wrt: Optional[Iterable[str]] = None) -> Derivation:
    """Derive the backward graph of ``graph`` (a Graph or IR text); see the module docstring."""
    from ..text.syntax import graph_argument
    graph = graph_argument(graph, "grad()")
    wrt_names = parse_wrt(graph, wrt)
    types = dict(graph.types)
    producer: dict[str, Op] = {}
    for op in graph.ops:
        for r in op.results:
            producer[r] = op

    # 1. activity: which values depend on wrt (varied) and reach an output (useful)
    varied = set(wrt_names)
    for op in graph.ops:
        if any(v in varied for v in op.operands if v is not None):
            varied.update(r for r in op.results if types[r].dtype.is_float)
    useful = set(graph.outputs)
    for op in reversed(graph.ops):
        if any(r in useful for r in op.results):
            useful.update(v for v in op.operands if v is not None)

    # 2. names: cotangent inputs first, numbered after every forward name
    top = max([int(n[1:]) for n in types] + [-1]) + 1
    e = Emitter(types, top, graph.source)
    e.derive = derive
    cot_inputs = []
    contrib: dict[str, list[str]] = {}
    for out in graph.outputs:
        c = e.fresh()
        types[c] = types[out]
        cot_inputs.append(GraphInput(c, types[out]))
        if out in varied:
            contrib.setdefault(out, []).append(c)

    def cotangent(v: str) -> Optional[str]:
        cs = contrib.get(v)
        if not cs:
            return None
        if len(cs) > 1:
            contrib[v] = [e.Sum(*cs)]
        return contrib[v][0]

    # 3. reverse sweep over the active ops
    for op in reversed(graph.ops):
        if not any(r in useful for r in op.results):
            continue
        need = [v is not None and v in varied for v in op.operands]
        if not any(need):
            continue
        cts = [cotangent(r) if r in varied else None for r in op.results]
        if all(c is None for c in cts):
            continue
        fn = gradient_rule(type(op))
        if fn is None:
            why = NO_RULE_REASON if op.is_backward else "no rule is registered for it"
            e.fail(op, f"cannot differentiate {op.op_name} ({op.to_string()}): {why}")
        _check_no_gradient(e, op, cts, need)
        e.current = op
        got = list(fn(e, op, cts, need))
        e.current = None
        # a rule may answer for omitted trailing operands too (always None)
        assert len(got) >= len(op.operands) and not any(got[len(op.operands):]), (op.op_name, got)
        for i, (v, ct) in enumerate(zip(op.operands, got)):
            if ct is None or not need[i]:
                continue
            vt, ctt = types[v], types[ct]
            assert vt.dtype == ctt.dtype, (op.to_string(), v, ct)
            if ctt.shape != vt.shape or (op.BROADCASTS and None in vt.shape):
                ct = e.ReduceSumTo(ct, v)
            contrib.setdefault(v, []).append(ct)

    # 4. outputs: one gradient per wrt input, each a distinct value made by an op
    outputs: list[str] = []
    for w in wrt_names:
        g = cotangent(w)
        if g is None:
            g = e.ZerosLike(w)
        elif g in outputs or g not in {r for op in e.ops for r in op.results}:
            g = e.Identity(g)  # an output must not repeat, nor be an input
        outputs.append(g)

    # 5. dead-code sweep over the backward ops, then the forward ops they read
    live = set(outputs)
    backward = []
    for op in reversed(e.ops):
        if any(r in live for r in op.results):
            backward.append(op)
            live.update(v for v in op.operands if v is not None)
    backward.reverse()
    forward = []
    for op in reversed(graph.ops):
        if any(r in live for r in op.results):
            forward.append(op.copy(loc=None, result_types=[types[r] for r in op.results]))
            live.update(v for v in op.operands if v is not None)
    forward.reverse()

    name = f"{graph.name}_grad" if graph.name else None
    from ..ir.labels import derived_labels
    out_labels = derived_labels(graph, cot_inputs, wrt_names)
    inputs = [GraphInput(i.name, i.type, label=i.label) for i in graph.inputs] + cot_inputs
    derived = Graph(inputs, forward + backward, outputs, name=name, output_labels=out_labels)
    diags = derived.diagnostics()
    if diags:  # pragma: no cover - a bug in a rule
        raise AssertionError("gradir bug: the derived graph is invalid:\n"
                             + "\n".join(d.render() for d in diags) + "\n" + derived.to_text())
    return Derivation(derived, graph, wrt_names, [(c.name, o) for c, o in zip(cot_inputs, graph.outputs)])


def _check_no_gradient(e: Emitter, op: Op, cts: list, need: list) -> None:
    """A cotangent reaching a result the op declares no gradient flows back from (``NO_GRADIENT_RESULTS``),
    or asked of an operand it is not differentiable in (``NO_GRADIENT_OPERANDS``): an error at the op."""
    cls = type(op)
    for k in cls.NO_GRADIENT_RESULTS:
        if k < len(cts) and cts[k] is not None:
            what = cls.RESULTS[k]
            rest = [r for j, r in enumerate(cls.RESULTS) if j not in cls.NO_GRADIENT_RESULTS]
            takes = ", ".join(rest[:-1]) + " and " + rest[-1] if len(rest) > 1 else "".join(rest) or "no result"
            e.fail(op, f"cannot differentiate {op.op_name} through its result {what} ({op.results[k]}), which "
                       f"reaches an output: {cls.GRADIENT or 'its gradient'} accepts upstream gradients of {takes} "
                       f"only, so no gradient can flow back from {what}", result=k)
    for i in cls.NO_GRADIENT_OPERANDS:
        if i < len(need) and need[i]:
            name = cls.operand_spec(i).name
            e.fail(op, f"cannot differentiate {op.op_name} with respect to its {name} ({op.operands[i]}): "
                       f"{op.op_name} is not differentiable in {name}; leave the inputs it is computed from out "
                       "of wrt (--wrt)")


def grad(graph: Union[Graph, str], wrt: Optional[Iterable[str]] = None) -> Graph:
    """The backward graph of ``graph`` (validated): inputs are the forward inputs then
    one cotangent per forward output; outputs are the gradients w.r.t. ``wrt``
    (input names, default every floating-point input), in ``wrt`` order."""
    return derive(graph, wrt).graph


def grad_text(graph: Graph, wrt: Optional[Iterable[str]] = None) -> str:
    """The derived graph as a file: a header comment, then canonical text (what ``gradir grad`` writes)."""
    d = derive(graph, wrt)
    return d.header() + d.graph.to_text()
