"""Lowering: task graph + mapping + target -> tile program."""
from septran.lowering.lower import Specialization, lower
from septran.lowering.explain import explain

__all__ = ["Specialization", "lower", "explain"]
