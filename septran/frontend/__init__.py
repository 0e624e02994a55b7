"""Task Lang: tracing logic files into task graphs."""
from septran.frontend import task
from septran.frontend.graph import build_graph
from septran.frontend.tracer import TaskFunction

__all__ = ["task", "build_graph", "TaskFunction"]
