"""zlib's CRC-32 combination through ctypes, for the Python framing loops of ``framing.py``
(``nativecheck.c`` has its own): ``combine(crc(A), crc(B), len(B)) == crc(A + B)``, so the
record CRC of a big message is computed without a second pass over its body. Python's zlib
module does not expose it. Each function checks the library against ``zlib.crc32`` once and
gives None when it is missing or misbehaves."""
from __future__ import annotations

import zlib

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

_COMBINE: list[Any] = []
_COMBINE_OP: list[Any] = []


def _libz() -> Any:
    """zlib's shared library, by its usual soname first: ``ctypes.util.find_library`` imports
    ``subprocess`` and runs ``ldconfig -p`` (~10 ms of a piped send's start-up); it is asked
    only where that name does not load."""
    import ctypes
    try:
        return ctypes.CDLL("libz.so.1")
    except OSError:
        import ctypes.util
        name = ctypes.util.find_library("z")
        if name is None:
            raise
        return ctypes.CDLL(name)


def crc32_combine() -> Any:
    """zlib's ``crc32_combine`` (not exposed by Python's zlib module), or None.

    ``combine(crc(A), crc(B), len(B)) == crc(A + B)``: the record CRC of a big message is
    then computed without a second pass over its body. Checked against ``zlib.crc32`` once,
    so a library that misbehaves is simply not used."""
    if not _COMBINE:
        fn = None
        try:
            import ctypes
            lib = _libz()
            f = lib.crc32_combine
            f.restype = ctypes.c_ulong
            f.argtypes = (ctypes.c_ulong, ctypes.c_ulong, ctypes.c_long)
            a, b = b"mqctl" * 7, bytes(range(256)) * 9
            if f(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b):
                fn = f
        except (OSError, AttributeError, ImportError):
            fn = None
        _COMBINE.append(fn)
    return _COMBINE[0]


def combiner() -> Any:
    """zlib's ``(crc32_combine_gen, crc32_combine_op)`` (zlib >= 1.2.12), or None.

    ``op(crc(A), crc(B), gen(len(B))) == crc(A + B)``; ``gen`` is computed once per body length
    (a batch's bodies mostly share one), ``op`` is one carry-less multiply: far cheaper than a
    pass over a big body. Checked against ``zlib.crc32`` once."""
    if not _COMBINE_OP:
        fn = None
        try:
            import ctypes
            lib = _libz()
            gen, op = lib.crc32_combine_gen, lib.crc32_combine_op
            gen.restype, gen.argtypes = ctypes.c_ulong, (ctypes.c_long,)
            op.restype, op.argtypes = ctypes.c_ulong, (ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
            a, b = b"mqctl" * 7, bytes(range(256)) * 9
            if op(zlib.crc32(a), zlib.crc32(b), gen(len(b))) == zlib.crc32(a + b):
                fn = (gen, op)
        except (OSError, AttributeError, ImportError):
            fn = None
        _COMBINE_OP.append(fn)
    return _COMBINE_OP[0]
