"""Types of the C module ``nativecheck.c`` (its source says what it does)."""
import os
from collections.abc import Sequence
from typing import Any

INTERFACE: int

def check_run(span: bytes, view: memoryview | None, lo: int, entries: list[tuple[int, int, int]], i: int,
              offset: int, queue_id: int, topic_field: bytes, max_bytes: int, total_bytes: int, flags: int,
              offsets: list[int], bodies: list[bytes | memoryview], born: list[int], stored: list[int],
              props: list[bytes], phys: list[int], reconsume: list[int], fd: int, fd_base: int, seg_size: int,
              /) -> tuple[int, int]: ...

def cut_entries(raw: bytes | bytearray | memoryview, lo: int, limit: int, max_bytes: int, ordered: bool,
                /) -> tuple[list[tuple[int, int, int]], int, int]: ...

def crc32(data: bytes | bytearray | memoryview, /) -> int: ...

def frame_run(bodies: Sequence[bytes | bytearray | memoryview], i: int, qids: list[int], tails: list[bytes] | None,
              tail: bytes, topic_field: bytes, uk_field: bytes, first_counter: int, key_crc0: int, const48: bytes,
              pos: int, room_end: int, nxt: list[int], cqb: list[Any], tags: int, offs: list[int], physs: list[int],
              hashes: list[int], parts: list[Any], refer_from: int, /) -> tuple[int, int, int]: ...

def index_add(table: bytearray, slots: int, hashes: list[int], physs: list[int], tdiff: int, count: int, gap: int,
              /) -> tuple[bytes, list[tuple[int, int]]] | None: ...

def unique_keys(head: str, first: int, n: int, /) -> list[str]: ...
def links_size(fd: int, /) -> tuple[int, int]: ...

def stat_stamp(path: str | os.PathLike[str], /) -> tuple[int, int, int] | None: ...

def untimed_stat(target: int | str | os.PathLike[str], /) -> tuple[int, int, int]: ...
