"""Labels: a person's name for a graph input or output (docs/format.md, "Labels").

A label is any non-empty string, written as a JSON string after the value's name
(``input t0 "x" : Float32 [8]``, ``output t9 "grad(x)"``).  Labels are part of the
graph (``Graph.key`` includes them), unique per graph, and are the keys a person
meets: ``Executable.run`` accepts inputs by label or by value name and returns
outputs keyed by label where there is one, as ``gradir run`` does in its ``.npz``
files and its table.

Rules (checked by ``check_labels``, called from ``verify.py``):

* a label is a non-empty string without NUL, and valid Unicode text (no lone surrogate escape such
  as ``"\\ud800"``: it could not be written as UTF-8);
* labels are unique among a graph's inputs and outputs, except that an output
  that is itself an input may repeat that input's label;
* a label may not be the name (``tN``) of another value of the graph: in an
  ``.npz`` of inputs, or of outputs, ``t3`` must mean one array.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from ..errors import ArgumentError, Diagnostic, InputError

if TYPE_CHECKING:  # named in annotations only: importing it here would close an import cycle (graph uses this)
    from .graph import Graph

__all__ = ["Outputs", "derived_labels", "label_text", "output_line", "output_label_list", "output_labels_of",
           "check_labels", "check_label_arg", "input_key", "output_keys", "inputs_by_name", "keyed_by_label"]

_VALUE_NAME = re.compile(r"t[0-9]+")


def label_text(label: Optional[str]) -> str:
    """The label as printed after a value name: `` "x"`` (JSON escapes, non-ASCII kept), or ``""``."""
    return "" if label is None else " " + json.dumps(label, ensure_ascii=False)


def output_labels_of(graph: "Graph") -> list[Optional[str]]:
    """One label (or ``None``) per output (robust to ``outputs`` having been reassigned)."""
    labels = list(getattr(graph, "output_labels", None) or [])[:len(graph.outputs)]
    return labels + [None] * (len(graph.outputs) - len(labels))


def output_line(graph: "Graph") -> str:
    return "output " + ", ".join(n + label_text(lb) for n, lb in zip(graph.outputs, output_labels_of(graph)))


def check_label_arg(label: Any, what: str) -> Optional[str]:
    """``label`` if it is ``None`` or a usable label, else ``ArgumentError`` (for the Python API)."""
    if label is None:
        return None
    if not isinstance(label, str):
        raise ArgumentError(f"{what}: a label must be a str or None, got {type(label).__name__}")
    why = _label_problem(label)
    if why:
        raise ArgumentError(f"{what}: {why}")
    return label


def output_label_list(labels: Optional[Iterable[Optional[str]]], n: int) -> list[Optional[str]]:
    if labels is None:
        return [None] * n
    if isinstance(labels, (str, bytes)):
        raise ArgumentError(f"output_labels must be a list of labels (str or None), got {type(labels).__name__}")
    out = [check_label_arg(lb, "output_labels") for lb in labels]
    if len(out) != n:
        raise ArgumentError(f"output_labels has {len(out)} labels for {n} outputs")
    return out


def surrogate_problem(text: str) -> Optional[str]:
    """Why ``text`` is not valid Unicode text (a lone surrogate such as ``"\\ud800"``, which JSON escapes
    allow and UTF-8 cannot encode), or None.  Such a label could be neither printed to a ``.gir`` file
    nor stored as an ``.npz`` key or an ONNX name."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"a label must be valid Unicode text; \\u{ord(text[e.start]):04x} (character {e.start}) is a lone "
                f"surrogate, half of a UTF-16 pair")
    return None


def _label_problem(label: str) -> Optional[str]:
    if label == "":
        return "a label may not be empty"
    if "\0" in label:
        return "a label may not contain NUL (\\u0000)"
    return surrogate_problem(label)


def check_labels(graph: "Graph", err) -> None:
    """Report (through ``err(message, span)``) every broken label rule."""
    names = {i.name for i in graph.inputs}
    names.update(r for op in graph.ops for r in op.results)
    owner: dict[str, str] = {}  # label -> the value it labels
    entries = [(i.name, i.label, i.label_span or i.span, "input") for i in graph.inputs if i.label is not None]
    spans = list(getattr(graph, "output_label_spans", None) or [])
    for k, (name, label) in enumerate(zip(graph.outputs, output_labels_of(graph))):
        if label is not None:
            sp = spans[k] if k < len(spans) and spans[k] is not None else (
                graph.output_spans[k] if k < len(graph.output_spans) else None)
            entries.append((name, label, sp, "output"))
    for name, label, span, kind in entries:
        shown = json.dumps(label, ensure_ascii=False)
        why = _label_problem(label)
        if why:
            err(f"{kind} {name}: {why}", span)
            continue
        if _VALUE_NAME.fullmatch(label) and label != name and label in names:
            err(f"{kind} {name}: label {shown} is the name of another value, {label} (an .npz key {label} would "
                f"be ambiguous)", span)
            continue
        if label in owner and owner[label] != name:
            err(f"{kind} {name}: label {shown} is already the label of {owner[label]}; labels are unique per graph",
                span)
            continue
        owner.setdefault(label, name)
    input_labels = {i.name: i.label for i in graph.inputs if i.label is not None}
    for k, (name, label) in enumerate(zip(graph.outputs, output_labels_of(graph))):
        # an output of an input with a different label would give the value two labels
        own = input_labels.get(name)
        if own is not None and label is not None and label != own:
            sp = spans[k] if k < len(spans) and spans[k] is not None else None
            err(f"output {name}: labelled {json.dumps(label, ensure_ascii=False)}, but input {name} is labelled "
                f"{json.dumps(own, ensure_ascii=False)} (an input output may only repeat its label)", sp)


def input_key(inp: Any) -> str:
    """The key an input is known by in files and results: its label, else its name."""
    return inp.label if inp.label is not None else inp.name


def output_keys(graph: "Graph") -> list[str]:
    """The key of each output in results and ``.npz`` files: its label, else its name."""
    return [lb if lb is not None else n for n, lb in zip(graph.outputs, output_labels_of(graph))]


def inputs_by_name(graph: "Graph", inputs: Mapping[str, Any], filename: Optional[str] = None) -> dict[str, Any]:
    """``inputs`` (keyed by label or by value name) keyed by value name; keys that name nothing stay as they
    are (``check_inputs`` reports them).  An input given both ways is an ``InputError`` naming both keys."""
    labelled = {i.label: i.name for i in graph.inputs if i.label is not None}
    if not labelled:
        return dict(inputs)
    out: dict[str, Any] = {}
    via: dict[str, str] = {}
    problems = []
    spans = {i.name: i.span for i in graph.inputs}
    for key, a in inputs.items():
        name = labelled.get(key, key) if isinstance(key, str) else key
        if name in out:
            problems.append(Diagnostic(f"input {name} is given twice, as {via[name]!r} and as {key!r} (its label "
                                       f"and its name); give one", spans.get(name), graph.source if spans.get(name)
                                       else None))
            continue
        out[name] = a
        via[name] = key
    if problems:
        if filename and not problems[0].span:
            problems[0] = Diagnostic(problems[0].message, filename=filename)
        raise InputError(problems)
    return out


def keyed_by_label(graph: "Graph", arrays: Mapping[str, Any]) -> dict[str, Any]:
    """Input ``arrays`` keyed by value name, re-keyed by label where there is one (for ``--save-inputs``)."""
    keys = {i.name: input_key(i) for i in graph.inputs}
    return {keys.get(k, k): a for k, a in arrays.items()}


def derived_labels(graph: "Graph", cot_inputs: list, wrt: list[str]) -> list[Optional[str]]:
    """The labels of a derived (backward) graph, as ``gradir grad`` writes them: the forward inputs keep
    theirs; the cotangent of output ``o`` is labelled ``cotangent(K)`` and the gradient for input ``i``
    ``grad(K)``, K being the label of ``o`` or ``i`` where it has one, else its name.  Sets the cotangents'
    labels; returns the gradient outputs' labels.  A made label that would repeat one already taken is
    left off (the value is then known by its name)."""
    taken = {i.label for i in graph.inputs if i.label is not None}
    keys = {i.name: input_key(i) for i in graph.inputs}

    def fresh(label: str) -> Optional[str]:
        if label in taken:
            return None
        taken.add(label)
        return label

    for c, key in zip(cot_inputs, output_keys(graph)):
        c.label = fresh(f"cotangent({key})")
    return [fresh(f"grad({keys[w]})") for w in wrt]


class Outputs(dict):
    """``Executable.run``'s result when some output has a label: keyed by label (else by name), and
    ``res[name]`` also finds a labelled output by its value name."""

    def __init__(self, aliases: Mapping[str, str]) -> None:
        super().__init__()
        self._aliases = aliases  # value name -> its key

    def __missing__(self, key: Any) -> Any:
        alias = self._aliases.get(key) if isinstance(key, str) else None
        if alias is None or not dict.__contains__(self, alias):
            raise KeyError(key)
        return dict.__getitem__(self, alias)
