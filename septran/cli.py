"""``septran``: the command line. Each subcommand is one module, registered here by one line.

A subcommand's module defines ``add_arguments(parser)`` and ``run(args) ->
int`` (the exit status); it is imported only when ``septran`` builds its
parser. To add one: ``register("tune", "septran.tuning.cli_tune", "...")``.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from septran.errors import SepTranError


@dataclass(frozen=True)
class Command:
    name: str
    module: str  # defines add_arguments(parser) and run(args) -> int
    help: str


COMMANDS: dict[str, Command] = {}


def register(name: str, module: str, help: str) -> None:
    """Adds ``septran NAME``, implemented by ``module``."""
    COMMANDS[name] = Command(name, module, help)


register("tune", "septran.tuning.cli_tune", "tune a mapping's search space (!tune) for given shapes")
register("db", "septran.tuning.cli_db", "list and export the tuning database's records")
register("targets", "septran.commands.targets", "list the targets: processors, memories, leaves, dtypes, copy options")
register("explain", "septran.commands.explain", "show what each lowering pass makes of a logic and a mapping for given shapes")
register("compile", "septran.commands.compile", "lower, emit and build a kernel for given shapes; --dump DIR writes every stage")
register("run", "septran.commands.run", "run a kernel (or an ONNX model) on random inputs, check it against the logic's reference, time it")
register("tune-model", "septran.commands.tune_model", "tune every kernel a model block's prefill and decode step call, into the tuning database")


def parser() -> argparse.ArgumentParser:
    from septran.version import __version__

    top = argparse.ArgumentParser(prog="septran", description="SepTran: an operator's logic, mapped to each target.")
    top.add_argument("--version", action="version", version=f"septran {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS.values():
        module = importlib.import_module(command.module)
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return top


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except SepTranError as e:
        print(e, file=sys.stderr)
        return 2
    except BrokenPipeError:  # `septran db list | head`
        return 0
    except OSError as e:  # a file the command cannot read or write: the system's message, without a traceback
        print(f"septran {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
