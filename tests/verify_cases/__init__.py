"""Cases of issue 8 (no program emitted that is not proven in bounds): logic files, and ``cases.py``,
one function per case that the tests in tests/test_verify_*.py call."""
