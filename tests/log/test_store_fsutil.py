"""store/fsutil.py: the cached segment listing."""
from __future__ import annotations

import os
from pathlib import Path


def test_segment_listing_relists_when_the_directory_changes_even_within_a_clock_tick(tmp_path: Path) -> None:
    """The cached listing is keyed on the directory's mtime, which a coarse file-system clock
    may leave unchanged across a create: a listing taken close to the mtime it saw is not
    trusted again (racy-git rule), one taken long after it is."""
    import time

    from store.fsutil import SegmentListing
    d = tmp_path / "segs"
    d.mkdir()
    (d / f"{0:020d}").touch()
    listing = SegmentListing(d)
    now = time.time_ns()
    os.utime(d, ns=(now, now))                   # modified "just now"
    assert listing.bases() == [0]
    (d / f"{100:020d}").touch()
    os.utime(d, ns=(now, now))                   # a clock that has not ticked since
    assert listing.bases() == [0, 100]           # not trusted: listed again
    old = now - 10**10
    os.utime(d, ns=(old, old))                   # settled long ago
    assert listing.bases() == [0, 100]
    (d / "junk").touch()                         # mtime moves: listed again (junk is no segment)
    assert listing.bases() == [0, 100]
    (d / f"{300:020d}").touch()
    assert listing.bases() == [0, 100, 300]
    got = listing.bases()
    got.append(1)                                # callers may change what they get
    assert listing.bases() == [0, 100, 300]
