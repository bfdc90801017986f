"""The names ``store.spark`` exports lazily (``_EXPORTS`` in ``__init__.py``), for type checkers.
Kept equal to ``_EXPORTS`` by ``tests/test_structure.py``."""

from store.spark.datasource import (
    local_session as local_session,
)
from store.spark.datasource import (
    prepare_environment as prepare_environment,
)
from store.spark.datasource import (
    register as register,
)
from store.spark.datasource import (
    session_conf as session_conf,
)
from store.spark.schema import (
    SCHEMA as SCHEMA,
)
from store.spark.schema import (
    SCHEMA_DDL as SCHEMA_DDL,
)

__all__ = [
    "SCHEMA",
    "SCHEMA_DDL",
    "local_session",
    "prepare_environment",
    "register",
    "session_conf",
]
