"""The names ``store.spark`` exports lazily (``_EXPORTS`` in ``__init__.py``), for type checkers.
Made from ``_EXPORTS`` by ``python -m tests.test_structure``; a test keeps them equal."""

from store.spark.datasource import local_session as local_session
from store.spark.datasource import prepare_environment as prepare_environment
from store.spark.datasource import register as register
from store.spark.datasource import session_conf as session_conf
from store.spark.errors import mqctl_errors as mqctl_errors
from store.spark.errors import store_error as store_error
from store.spark.schema import SCHEMA as SCHEMA
from store.spark.schema import SCHEMA_DDL as SCHEMA_DDL
from store.spark.ship import ship_archive as ship_archive
