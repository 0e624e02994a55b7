"""A vendor library at run time: its errors after each call, its debug mode (``build/vendor.py`` builds and loads it)."""
from __future__ import annotations

import ctypes

from septran.build.vendor import library
from septran.errors import DeviceError
from septran.target import Target


def check_errors(target: Target, kernel_name: str) -> None:
    """Raises DeviceError with the vendor's message if the last call left an error (a vendor without an error
    channel: nothing to ask, and no call into the library)."""
    if target.vendor is None or target.vendor.take_error is None:
        return
    lib = library(target)
    buf = ctypes.create_string_buffer(1024)
    take = getattr(lib, target.vendor.take_error)
    take.restype = ctypes.c_int32
    code = take(buf, ctypes.c_int32(len(buf)))
    if code:
        raise DeviceError(f"{kernel_name} on {target.name}: {buf.value.decode(errors='replace')} (vendor error {code})")


def set_debug(target: Target, on: bool) -> None:
    """Switches the vendor library's debug mode (reports of reads before a transfer was synchronised)."""
    fn = getattr(library(target), target.vendor.set_debug)
    fn(ctypes.c_int32(1 if on else 0))


def debug_violations(target: Target) -> int:
    fn = getattr(library(target), target.vendor.debug_violations)
    fn.restype = ctypes.c_int32
    return int(fn())
