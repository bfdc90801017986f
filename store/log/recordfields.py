"""The fields of checked records that ``store check`` and ``store recover`` compare the derived
files against, taken from a window of the log as arrays (``recordscan.py`` finds and checks
the records): each record's topic, and its consume-queue tag code and key-index keys as the
write path makes them (``#UNIQ_KEY``, ``topic#key`` per KEYS word; record layout and key
hash: ``format.py``). The common record, whose properties are its unique key alone, is told
apart and hashed as arrays; any other is read one by one.
"""
from __future__ import annotations

from typing import Any

from store.log import format as F
from store.log.arrays import layouts
from store.log.record import (
    PROP_DELIVER_MS,
    PROP_KEYS,
    PROP_TAGS,
    PROP_UNIQ_KEY,
    crc32,
    entry_tags_code,
)

_TAGS, _KEYS, _UNIQ, _DELIVER = (p.encode() + F.NAME_VALUE_SEP_B for p in (PROP_TAGS, PROP_KEYS, PROP_UNIQ_KEY,
                                                                        PROP_DELIVER_MS))
_property_value = F.property_value
_HASH_MARK = crc32(F.uniq_key_of("").encode())   # (the CRC of "#" + a unique key continues it)
_KEY_SEP = F.INDEX_KEY_SEP_B
_CRC_MASK = F.CRC_MASK
_TOPIC_ROUNDS = 8   # topics of a window told apart as arrays (more: one record at a time)
_UNIQ_LEN = F.MSG_ID_LEN                   # a unique key: 32 hex digits (format.py)
_UNIQ_PROPS = len(_UNIQ) + _UNIQ_LEN + 1   # properties that are a unique key alone
_UNIQ_TABLE: list[tuple[Any, int]] = []    # _uniq_hashes' tables, and the CRC of the zero key


def topic_ids(buf: bytes, t: Any, p: Any, topics: dict[bytes, str], ids: dict[str, int]) -> Any:
    """Each record's topic as its index in ``ids``: the topic of the first record not yet
    named compared as arrays with the topic fields of all those left, for a few topics (a
    window of interleaved topics); the rest one by one."""
    np = layouts().np
    tid = np.full(len(t), -1, np.int64)
    b = np.frombuffer(buf, np.uint8)
    rest = np.arange(len(t))
    for _ in range(_TOPIC_ROUNDS):
        if not len(rest):
            break
        j = int(rest[0])
        field = bytes(buf[int(t[j]):int(p[j]) - 2])
        tt = t[rest]
        at = np.minimum(tt, len(b) - (len(field) + 7) // 8 * 8)
        same = _equal_at(np, b, at, field) & (tt == at)
        same[0] = True
        tid[rest[same]] = ids.setdefault(_topic_name(topics, field[1:]), len(ids))
        rest = rest[~same]
    for j in rest.tolist():
        tid[j] = ids.setdefault(_topic_name(topics, buf[int(t[j]) + 1:int(p[j]) - 2]), len(ids))
    return tid


def _topic_name(topics: dict[bytes, str], raw: bytes) -> str:
    name = topics.get(raw)
    if name is None:
        name = topics[raw] = raw.decode("utf-8", "replace")
    return name


def keys(buf: bytes, p: Any, crc_at: Any, phys: Any, rollback: Any, tid: Any,
          names: list[str]) -> tuple[Any, Any, Any]:
    """Tag codes, and the index keys' hashes with their records' offsets (``#UNIQ_KEY`` and
    ``topic#key`` per KEYS word; none for a rolled-back half), as the write path makes them.
    The common record, whose properties are its unique key alone (``UNIQ_KEY`` 0x01, 32
    bytes free of 0x01 and 0x02, 0x02), is told and hashed as arrays (:func:`_uniq_hashes`);
    the others one by one (:func:`_record_keys`)."""
    np = layouts().np
    n = len(p)
    b = np.frombuffer(buf, np.uint8)
    common = ((crc_at - p) == _UNIQ_PROPS) & ~rollback
    at = np.where(common, p, 0)
    common &= _equal_at(np, b, at, _UNIQ) & (b[at + _UNIQ_PROPS - 1] == 2)
    at = np.where(common, at + len(_UNIQ), 0)
    value = np.lib.stride_tricks.sliding_window_view(b, _UNIQ_LEN)[at]
    # no byte below 3 (so no 0x01 or 0x02): x - 3 borrows into the top bit of a byte below 3
    w = value.view("<u8")
    low = (w - np.uint64(0x0303030303030303)) & ~w & np.uint64(0x8080808080808080)
    common &= (low[:, 0] | low[:, 1] | low[:, 2] | low[:, 3]) == 0
    tags = np.zeros(n, np.int64)
    if bool(common.all()):
        return tags, _uniq_hashes(np, value), phys
    kh = _uniq_hashes(np, value[common])
    kp = phys[common]
    slow = np.flatnonzero(~common)
    if not len(slow):
        return tags, kh, kp
    sh: list[int] = []
    sp: list[int] = []
    for j, a, e, ph, rb, ti in zip(slow.tolist(), p[slow].tolist(), crc_at[slow].tolist(), phys[slow].tolist(),
                                   rollback[slow].tolist(), tid[slow].tolist()):
        tags[j] = _record_keys(buf[a:e], names[ti], ph, rb, sh, sp)
    kh = np.concatenate([kh, np.array(sh, np.int64)])
    kp = np.concatenate([kp, np.array(sp, np.int64)])
    order = np.argsort(kp, kind="stable")   # log order; a record's own keys as it listed them
    return tags, kh[order], kp[order]


def _record_keys(pr: bytes, tname: str, ph: int, rollback: bool, kh: list[int], kp: list[int]) -> int:
    """One record's index keys (appended to ``kh``/``kp``) from its properties ``pr``; returns
    its tag code."""
    tag = 0
    if _TAGS in pr or _DELIVER in pr:
        found = {name: v.decode("utf-8", "replace")
                 for name, v in ((PROP_TAGS, _property_value(pr, _TAGS)),
                                 (PROP_DELIVER_MS, _property_value(pr, _DELIVER))) if v}
        tag = entry_tags_code(tname, found)
    if rollback:
        return tag
    uk = _property_value(pr, _UNIQ)
    if uk:
        kh.append(crc32(uk, _HASH_MARK) & _CRC_MASK)
        kp.append(ph)
    if _KEYS in pr:
        kw = _property_value(pr, _KEYS)
        if kw:
            tn = tname.encode()
            for k in kw.split(b" "):
                if k:
                    kh.append(crc32(tn + _KEY_SEP + k) & _CRC_MASK)
                    kp.append(ph)
    return tag


def _uniq_hashes(np: Any, value: Any) -> Any:
    """``crc32(b"#" + key) & CRC_MASK`` of each row of ``value`` (n x 32 bytes) as arrays.
    CRC-32 is affine over GF(2): for messages of one length, the CRC of ``"#" + key`` is the
    CRC of ``"#"`` and 32 zero bytes, xor, for every position, the change that position's
    byte makes. Taken two bytes at a time: 16 tables of 65536 (4 MiB, made once)."""
    if not _UNIQ_TABLE:
        zero = bytes(_UNIQ_LEN)
        c0 = crc32(zero, _HASH_MARK)
        one = np.array([[crc32(zero[:j] + bytes([v]) + zero[j + 1:], _HASH_MARK) ^ c0 for v in range(256)]
                        for j in range(_UNIQ_LEN)], np.uint32)
        # pair j, little-endian 16-bit value lo | hi << 8: one[2j][lo] ^ one[2j+1][hi]
        pairs = (one[0::2][:, None, :] ^ one[1::2][:, :, None]).reshape(_UNIQ_LEN // 2, 65536)
        _UNIQ_TABLE.append((pairs, c0))
    pairs, c0 = _UNIQ_TABLE[0]
    if not len(value):
        return np.zeros(0, np.int64)
    v = value.view("<u2")
    h = pairs[0][v[:, 0]]
    for j in range(1, _UNIQ_LEN // 2):
        h ^= pairs[j][v[:, j]]
    return ((h ^ np.uint32(c0)) & np.uint32(F.CRC_MASK)).astype(np.int64)


def _equal_at(np: Any, b: Any, at: Any, pattern: bytes) -> Any:
    """Whether ``pattern`` stands at each of ``at`` in ``b``, compared 8 bytes at a time (the
    bytes up to the next multiple of 8 past the pattern must lie in ``b``)."""
    u = np.uint64
    w = np.lib.stride_tricks.sliding_window_view(b, 8)
    n = len(at)
    eq = np.ones(n, bool)
    for k in range(0, len(pattern), 8):
        chunk = pattern[k:k + 8]
        word = w[at + k].view("<u8").reshape(n)
        if len(chunk) < 8:
            word = word & u((1 << 8 * len(chunk)) - 1)
        eq &= word == u(int.from_bytes(chunk, "little"))
    return eq
