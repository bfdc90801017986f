"""The floor of a consume in Python: ``python consume_floor.py STORE > out``.

What ``mqctl consume T -g G --from first -e > out`` must do at least, with nothing else: start
an interpreter, read the commit log once in 8 MiB windows, check every record (its length
and the record CRC property, with the CRC ``mqctl`` uses), write each body and a newline to
stdout (``writev``, bodies not copied), and persist where it got to (one file written,
fsynced and renamed in). No group, no consume queue, no locks, no checks of queue ids. Run
by tests/bench/bench_produce.py beside ``mqctl consume`` and Redis's XREADGROUP + XACK: a
ratio to Redis that this program does not reach is not one ``mqctl consume`` can reach.
"""
import os
import struct
import sys

try:
    from isal.isal_zlib import crc32
except ImportError:
    from zlib import crc32

HEAD = struct.Struct(">iI76xi").unpack_from   # TOTALSIZE, MAGICCODE, BODYLENGTH
MAGIC = 0xDAA320A7
BLANK = 0xCBD43194
WINDOW = 8 << 20
MAX_RECORD = (4 << 20) + (64 << 10)   # the largest body, its properties and header
IOV_MAX = 1024


def main(store: str) -> int:
    logdir = os.path.join(store, "commitlog")
    count = 0
    out = sys.stdout.fileno()
    window = bytearray(WINDOW + MAX_RECORD)   # a window and what the last one left of a record
    whole = memoryview(window)
    for name in sorted(os.listdir(logdir)):
        fd = os.open(os.path.join(logdir, name), os.O_RDONLY)
        pos = 0
        carry = b""
        while True:
            # one window, read into again and again: a new 8 MiB bytes each time costs a
            # page fault per 4 KiB (the allocator maps it fresh), twice this program's own work
            k = len(carry)
            window[:k] = carry
            got = os.preadv(fd, [whole[k:k + WINDOW]], pos)
            if not got:
                break
            pos += got
            buf = mv = whole[:k + got]
            i, n = 0, k + got
            iov: list = []
            while i + 8 <= n:
                total, magic = struct.unpack_from(">iI", buf, i)
                if magic == BLANK:
                    i = n
                    break
                if i + total > n:
                    break
                total, magic, blen = HEAD(buf, i)
                end = i + total
                want = int(bytes(buf[end - 11:end - 1])[::-1])
                if magic != MAGIC or crc32(mv[i:end - 20]) & 0x7FFFFFFF != want:
                    sys.stderr.write(f"damaged record at {name}+{pos - n + i}\n")
                    return 5
                iov.append(mv[i + 88:i + 88 + blen])
                iov.append(b"\n")
                count += 1
                i = end
            for k in range(0, len(iov), IOV_MAX):
                part = iov[k:k + IOV_MAX]
                left = sum(map(len, part))
                while left:
                    w = os.writev(out, part)
                    left -= w
                    if left:   # a short write: the rest from where it stopped
                        rest = []
                        for b in part:
                            if w >= len(b):
                                w -= len(b)
                                continue
                            rest.append(memoryview(b)[w:])
                            w = 0
                        part = rest
            carry = bytes(mv[i:])
            del iov, mv, buf
        os.close(fd)
    tmp = os.path.join(store, "floor-offset.tmp")
    with open(tmp, "w") as fh:
        fh.write(f"{count}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, os.path.join(store, "floor-offset"))
    sys.stderr.write(f"{count} messages\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
