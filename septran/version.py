"""SepTran's version: a ground-floor fact, importable from any layer without importing the package's front door."""
__version__ = "0.1.0"
