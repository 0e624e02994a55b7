"""The Task Lang logic of the kernel library's operators, one file per operator (``<op>.py``, its mappings
``mappings/<target>/<op>.yaml``), installed with SepTran. ``examples/<op>/`` imports them from here."""
