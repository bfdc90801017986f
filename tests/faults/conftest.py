"""Fixtures for tests/faults: its ``mq`` (``faultutil.MQ``, with the fault tools) replaces the
suite's; the helpers live in ``faultutil.py``."""
from __future__ import annotations

from tests.faults.faultutil import mq  # noqa: F401  (the fixture)
