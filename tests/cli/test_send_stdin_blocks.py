"""Stdin in large blocks (mqctl/stdin.py) and batch writes to stdout (mqctl/output.py):
records cut exactly across block boundaries, whatever the delimiter and record size."""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from mqctl.stdin import LongRecord, read_chunks
from mqctl.stdin import split_records as _split


def test_split_completes_the_pending_record() -> None:
    assert _split(b"\nb\r\nc", b"\r\n", True, b"a\r") == ([b"a", b"b"], b"c")   # straddling delimiter
    assert _split(b"b\nc", b"\n", False, b"a") == ([b"ab"], b"c")
    assert _split(b"no delimiter", b"\n", True, b"x") == ([], b"xno delimiter")
    long = b"y" * 10 + b"\n" + b"z" * 2000 + b"\n" + b"w"
    parts, pending = _split(long, b"\n", True, b"x" * 1500)
    assert [bytes(p) for p in parts] == [b"x" * 1500 + b"y" * 10, b"z" * 2000] and pending == b"w"
    parts, pending = _split(b"q" * 1200 + b"\n\n" + b"r" * 5, b"\n", True)
    assert [bytes(p) for p in parts] == [b"q" * 1200, b""] and pending == b"r" * 5


@pytest.mark.parametrize("size,delim", [(5, b"\n"), (3000, b"\n"), (70000, b"\r\n"), (1500, b"\0")])
def test_read_chunks_from_a_pipe(size: int, delim: bytes) -> None:
    records = [(b"%08d" % i) + bytes([65 + i % 26]) * size for i in range(300 if size < 10000 else 40)]
    data = delim.join(records)   # no final delimiter: the last record comes at EOF
    r, w = os.pipe()

    def feed() -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(w, view[:50001]):]   # odd block sizes: records are cut anywhere
        os.close(w)

    t = threading.Thread(target=feed)
    t.start()
    got = []
    for parts, _more in read_chunks(r, delim, zero_copy=True):
        got += [bytes(p) for p in parts]
    t.join()
    os.close(r)
    assert got == records


def _feed(data: bytes, block: int = 50001) -> tuple[int, threading.Thread]:
    r, w = os.pipe()

    def feed() -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(w, view[:block]):]
        except BrokenPipeError:
            pass
        os.close(w)

    t = threading.Thread(target=feed)
    t.start()
    return r, t


@pytest.mark.parametrize("delim", [b"\n", b"\r\n"])
@pytest.mark.parametrize("ending", [b"", b"tail after it"])
def test_a_record_past_the_cap_is_counted_to_its_end_not_held(delim: bytes, ending: bytes) -> None:
    long = b"L" * 3_000_001   # spans many reads, its delimiter straddling two of them or none
    data = delim.join([b"a", b"b", long]) + (delim + ending if ending else b"")
    r, t = _feed(data, block=65537)
    got: list[bytes] = []
    with pytest.raises(LongRecord) as exc:
        for parts, _more in read_chunks(r, delim, zero_copy=True, cap=100_000):
            got += [bytes(p) for p in parts]
    t.join()
    os.close(r)
    assert got == [b"a", b"b"] and exc.value.size == len(long)


def test_an_endless_line_is_refused_once_counted_far_enough(tmp_path: Path) -> None:
    """``mqctl send T < /dev/zero``: a line without a newline and without an end was counted
    for ever, at full CPU, to say its size. Counting stops past COUNT_MAX: exit 5, "over N"."""
    import subprocess

    from tests.procs import MQCTL, mqctl_env
    with open("/dev/zero", "rb") as zero:
        res = subprocess.run([*MQCTL, "--store", str(tmp_path / "s"), "send", "t"], stdin=zero, capture_output=True,
                             text=True, env=mqctl_env(None), timeout=120)
    assert res.returncode == 5, res
    assert re.fullmatch(r"mqctl: error: line 1: message of over \d+ bytes exceeds the store's limit of \d+ bytes"
                        r" \(nothing was sent\)\n", res.stderr.splitlines(keepends=True)[-1]), res.stderr


def test_a_record_within_the_cap_spanning_many_reads_is_whole() -> None:
    records = [b"x" * 2_500_000, b"y", b"z" * 700_000]
    r, t = _feed(b"\r\n".join(records), block=4093)
    got = [bytes(p) for parts, _more in read_chunks(r, b"\r\n", zero_copy=True, cap=2_500_000) for p in parts]
    t.join()
    os.close(r)
    assert got == records


def test_a_fast_pipe_is_read_ahead_while_its_records_are_not_taken() -> None:
    # Once a read of a pipe is big (FAST_READ), the pipe is read by a thread up to READ_AHEAD
    # reads ahead (ReadAhead): a writer is not held back by a full pipe while the sender
    # writes a batch. Here the reader takes one group of records and no more while the
    # writer writes more than the pipe holds: it finishes (before, it waited for a read
    # that never came); then every record comes out, in order.
    import fcntl

    from mqctl.stdin import FAST_READ, READ_AHEAD
    line = 65536
    records = [(b"%08d" % i) + b"r" * (line - 9) for i in range(8)]
    r, w = os.pipe()
    room = fcntl.fcntl(r, fcntl.F_GETPIPE_SZ)
    if room < len(records) * (line + 1):
        room = fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, 1 << 20)   # (as read_chunks raises it)
    os.write(w, b"".join(rec + b"\n" for rec in records))   # 512 KiB: the first read is a fast one
    chunks = read_chunks(r, b"\n", zero_copy=True)
    first, _more = next(chunks)
    got = [bytes(p) for p in first]
    # writes of 64 KiB: each read ahead takes at least one of them whole
    more = [(b"%08d" % i) + b"m" * (line - 9) for i in range(8, 8 + room // line + READ_AHEAD // 2)]
    assert READ_AHEAD // 2 * line >= 2 * FAST_READ   # (more than the pipe holds)
    done = threading.Event()

    def feed() -> None:
        for rec in more:
            os.write(w, rec + b"\n")
        os.close(w)
        done.set()

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    finished = done.wait(120)   # (a wait for a writer that blocks forever when not read ahead)
    if not finished:
        os.close(r)   # (the writer gets EPIPE and ends)
    assert finished, "the writer was held back by a full pipe: nothing read it ahead"
    for parts, _more in chunks:
        got += [bytes(p) for p in parts]
    t.join()
    os.close(r)
    assert got == records + more


def _feed_reads(pieces: list[bytes]) -> tuple[int, threading.Thread]:
    """A pipe whose reader gets ``pieces`` one read each: a piece is written only once the
    reader has taken the one before (the pipe holds nothing: FIONREAD)."""
    import fcntl
    import struct
    import termios
    import time
    r, w = os.pipe()

    def feed() -> None:
        for piece in pieces:
            while struct.unpack("i", fcntl.ioctl(r, termios.FIONREAD, b"\0\0\0\0"))[0]:
                time.sleep(0.001)
            os.write(w, piece)
        while struct.unpack("i", fcntl.ioctl(r, termios.FIONREAD, b"\0\0\0\0"))[0]:
            time.sleep(0.001)
        os.close(w)

    t = threading.Thread(target=feed)
    t.start()
    return r, t


@pytest.mark.parametrize("cap", [None, 1 << 20])
@pytest.mark.parametrize("pieces", [
    [b"one<", b"|", b">two"],                 # the delimiter across three reads, its middle one short
    [b"one", b"<", b"|", b">", b"two"],       # a read a byte
    [b"one<", b"|", b">", b"two<|>three"],
])
def test_a_long_delimiter_across_reads_shorter_than_it_still_cuts(pieces: list[bytes], cap: int | None) -> None:
    r, t = _feed_reads(pieces)
    try:
        got = [bytes(p) for parts, _more in read_chunks(r, b"<|>", cap=cap) for p in parts]
    finally:
        t.join()
        os.close(r)
    assert got == b"".join(pieces).split(b"<|>")


def test_a_read_ahead_stopped_as_its_read_begins_reads_its_own_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The read-ahead thread begins its next read after looking at ``stopped``: when the
    sender stopped it just then and closed the pipe, and the number was given to a new pipe
    (the tests' next ``os.pipe()``), that read took the new pipe's data (the test reading past
    a long record lost its first records, under load). The thread reads its own descriptor."""
    import types

    from mqctl import stdin
    gate, parked, read_done = threading.Event(), threading.Event(), threading.Event()
    real = os.read

    def read(fd: int, n: int) -> bytes:
        if threading.current_thread().name != "mqctl-stdin":
            return real(fd, n)
        parked.set()
        assert gate.wait(20)   # (parked between its look at stopped and its read)
        try:
            return real(fd, n)
        finally:
            read_done.set()
    monkeypatch.setattr(stdin, "os", types.SimpleNamespace(**{**vars(os), "read": read}))
    r, w = os.pipe()
    os.write(w, b"old")
    ahead = stdin.ReadAhead(r, 65536, depth=1)
    assert parked.wait(20)
    ahead.stop()
    os.close(r)
    r2, w2 = os.pipe()   # (the lowest free numbers: r's, most likely)
    try:
        os.write(w2, b"new")
        gate.set()
        assert read_done.wait(20)
        os.close(w)
        os.set_blocking(r2, False)
        assert real(r2, 100) == b"new"
    finally:
        gate.set()
        os.close(r2)
        os.close(w2)
