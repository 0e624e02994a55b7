"""Autotuning (issue 10): search spaces, static pruning, the cost model, the search and its database."""
