"""tests/log: the storage engine's unit tests. Fixtures come from ``tests/conftest.py``; the
helpers shared by these tests are in ``storetestutil.py``."""
