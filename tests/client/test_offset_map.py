"""The process queue's offset map against ``SortedDict``, the structure it replaces: the same
keys in the same order after any mix of appends, out-of-order inserts, prefix drops, pops."""
from __future__ import annotations

import random

import pytest
from sortedcontainers import SortedDict

from store.client.process_queue import OffsetMap


def _agree(m: OffsetMap, ref: SortedDict) -> None:
    assert len(m) == len(ref)
    assert list(m) == list(ref.keys())
    assert [m[k] for k in m] == list(ref.values())
    if ref:
        assert m.first() == ref.keys()[0] and m.last() == ref.keys()[-1]


@pytest.mark.parametrize("seed", range(20))
def test_offset_map_behaves_as_a_sorted_dict(seed: int) -> None:
    rnd = random.Random(seed)
    m, ref = OffsetMap(), SortedDict()
    top = 0
    for _ in range(400):
        op = rnd.randrange(7)
        if op == 0:                                  # a pull: a run above everything cached
            n = rnd.randint(1, 30)
            keys = list(range(top, top + n))
            top += n + rnd.randint(0, 3)
            m.append_run(keys, [f"v{k}" for k in keys])
            ref.update((k, f"v{k}") for k in keys)
        elif op == 1:                                # put(): fresh keys in any order
            fresh = {k: f"w{k}" for k in rnd.sample(range(top + 10), 5) if k not in ref}
            if fresh:
                m.update(fresh)
                ref.update(fresh)
                top = max(top, max(fresh) + 1)
        elif op == 2 and ref:                        # a consumed batch: the oldest n
            n = rnd.randint(1, len(ref))
            assert m.head(n) == list(ref.keys()[:n])
            m.drop_head(n)
            for k in list(ref.keys()[:n]):
                del ref[k]
        elif op == 3 and ref:                        # one message, anywhere
            k = rnd.choice(list(ref.keys()))
            assert m.pop(k) == ref.pop(k)
            assert m.pop(k, "none") == "none"
        elif op == 4 and ref:                        # orderly take()
            assert m.pop_first() == ref.popitem(0)
        elif op == 5:                                # make_again(): back in front (or anywhere)
            k = rnd.randrange(top + 5)
            m[k] = f"x{k}"
            ref[k] = f"x{k}"
            top = max(top, k + 1)
        elif op == 6 and ref:
            k = rnd.choice(list(ref.keys()))
            i = ref.bisect_right(k)
            assert m.after(k, 4) == list(ref.keys()[i:i + 4])
            assert (k in m) and (top + 100 not in m)
        _agree(m, ref)
    m.clear()
    assert len(m) == 0 and list(m) == [] and m.head(3) == []
