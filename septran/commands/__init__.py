"""The command line's subcommands (``septran targets``, ``explain``, ``compile``, ``run``) and what they share.

Each module defines ``add_arguments(parser)`` and ``run(args) -> int``; ``septran/cli.py`` registers it by one line.
They reach the compiler through the front door (``import septran``), as a user's script would.
"""
