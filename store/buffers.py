"""The allocator told to keep big buffers: :func:`keep_big_buffers`."""
from __future__ import annotations

_TUNED: list[bool] = []


def keep_big_buffers() -> None:
    """Let this process reuse the memory of its big batch buffers instead of getting fresh
    pages from the kernel for each (glibc ``mallopt``; nothing elsewhere).

    By default glibc gives a freed buffer of a few MiB back to the kernel (``munmap``, or a
    heap trim), so the next batch's buffer of the same size is faulted in and zeroed page by
    page again: for bulk I/O (``mqctl send`` from stdin, ``consume`` of big batches) that
    costs about as much kernel time as the data's own copies. Buffers up to 32 MiB come from
    the heap and up to 64 MiB of free heap is kept: the process's peak memory is unchanged, it
    is only not returned between batches. Once per process; harmless where glibc is absent.
    Through the store's C module where it was built (loading ``ctypes`` costs ~1-2 ms of such
    a process), else ``ctypes``."""
    if _TUNED:
        return
    _TUNED.append(True)
    try:
        from store.log import nativecheck
        nativecheck.keep_big_buffers()
        return
    except (ImportError, AttributeError):
        pass   # (no C module, or one built from an older source: `pip install -e .` again)
    try:
        import ctypes
        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    except (OSError, AttributeError, ImportError):
        return
    mallopt(-3, 32 << 20)   # M_MMAP_THRESHOLD
    mallopt(-1, 64 << 20)   # M_TRIM_THRESHOLD
