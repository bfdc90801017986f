"""Fixtures for tests/faults; the helpers live in ``faultutil.py`` (a unique module name, so it
never clashes with another directory's ``conftest``)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from faultutil import mq  # noqa: E402,F401  (the fixture)
