"""Lowering: task graph + mapping + target -> tile program, as a list of passes (pipeline.py)."""
from septran.lowering.constants import Specialization
from septran.lowering.explain import explain
from septran.lowering.pipeline import lower

__all__ = ["Specialization", "lower", "explain"]
