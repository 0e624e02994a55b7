"""Autotuning, above the runtime: a search space pruned, ranked, searched and measured (``septran.tune``).

What it finds lands in the tuning database (``septran.records``), which the runtime reads; the runtime calls
the tuner only when one is handed to it (``septran.compile(..., autotune=True)``).
"""
