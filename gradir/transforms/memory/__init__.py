"""Training in bounded memory (``--memory-budget``): the compiler meets a budget on the planned peak by
recomputing (docs/memory.md).

* ``budget``: parsing a budget (``512MiB``, ``2GB``, bytes, ``auto``);
* ``model``: what a memory decision is (``Choice``, ``Option``, ``Interval``) and the solver that picks
  the options of least predicted extra time whose peak fits (a MILP, ``scipy.optimize.milp``);
* ``remat``: whole-graph rematerialization (a value recomputed from its operands before its late readers);
* ``revolve``: binomial checkpointing of a chain (Griewank's revolve), for the recurrences;
* ``recurrence``: LSTM and GRU layers that keep checkpoints of their state and recompute the gates;
* ``rows``: which ops are independent along rows (``ROW_RULES``);
* ``chunking``: regions independent along their rows run in chunks (a language model's logits);
* ``planner``: the budgeted plan (``plan_with_budget``) and what ``gradir plan`` shows of it.
"""
