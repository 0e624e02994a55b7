"""Autotuning: search spaces (septran.mapping.space), static pruning, a cost model, a guided search, a database."""
