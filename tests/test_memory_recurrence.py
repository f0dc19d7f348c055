"""Recurrences under a memory budget (docs/memory.md, "Recurrences"): binomial checkpointing (revolve),
the checkpointed LSTM ops bit-identical to LSTMTraining + LSTMGrad, and their choice provider."""

from __future__ import annotations

import pytest

from gradir.transforms.memory import revolve


def _simulate(n: int, s: int) -> int:
    """Run ``schedule(n, s)`` on positions: every action valid, units reversed last first; its advances."""
    slots, hand, advances, reversed_ = {0: 0}, None, 0, []
    for a in revolve.schedule(n, s):
        if a.kind == "restore":
            assert slots[a.slot] == a.unit
            hand = a.unit
        elif a.kind == "advance":
            assert hand == a.unit and a.to > a.unit
            advances += a.to - a.unit
            hand = a.to
        elif a.kind == "snapshot":
            assert hand == a.unit and 0 < a.slot < s
            slots[a.slot] = hand
        else:
            assert a.kind == "reverse" and hand == a.unit
            reversed_.append(a.unit)
            hand = None
    assert reversed_ == list(range(n - 1, -1, -1))
    return advances


def test_revolve_closed_form_and_schedule_match_the_dynamic_program():
    for n in range(1, 41):
        for s in range(1, 7):
            best = revolve.brute_force(n, s)
            assert revolve.min_advances(n, s) == best, (n, s)
            assert _simulate(n, s) == best, (n, s)


def test_revolve_schedule_is_deterministic_and_split_between_forward_and_backward():
    a = revolve.schedule(23, 4)
    assert a == revolve.schedule(23, 4)
    assert revolve.descent(a) + revolve.backward_actions(a) == a
    assert all(x.kind != "reverse" for x in revolve.descent(a))
    assert revolve.backward_actions(a)[0].kind == "restore"
    # every boundary a snapshot: the backward recomputes each unit once (one extra forward)
    assert revolve.recomputed_units(10, 10) == 10 and revolve.max_recomputations(10, 10) == 1
    assert revolve.recomputed_units(10, 1) == 10 * 9 // 2 + 10


def test_revolve_rejects_empty_chains():
    with pytest.raises(ValueError, match="n >= 1"):
        revolve.schedule(0, 2)


def test_lstm_plans_are_a_small_pareto_front_from_one_extra_forward_down():
    plans = revolve.lstm_plans(2048, 32, 2 * 32 * 512 * 4, 6 * 32 * 512 * 4, 1 << 20, 1e-4)
    assert 2 <= len(plans) <= 8
    assert plans[0].recomputed_steps == 2048 and plans[0].max_recomputations == 1
    assert all(p.segment % 32 == 0 for p in plans)
    for p, q in zip(plans, plans[1:]):
        assert q.memory < p.memory and q.extra_seconds >= p.extra_seconds
