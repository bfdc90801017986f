"""Every error class round-trips through pickle with its attributes, so an error raised in a
``ProcessPoolExecutor`` worker (or sent over any pickling channel) comes back as itself, not
as ``BrokenProcessPool`` (an ``__init__`` with other required arguments than ``args`` once
made them fail to unpickle)."""
from __future__ import annotations

import concurrent.futures as cf
import inspect
import multiprocessing
import pickle
from typing import Any

import pytest

import store
import store.errors as E


def _error_classes() -> list[type[E.StoreError]]:
    found, todo = [], [E.StoreError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(found), key=lambda c: c.__name__)


def _make(cls: type[E.StoreError]) -> E.StoreError:
    """An instance, every parameter of ``__init__`` given a distinct value of its kind."""
    kwargs: dict[str, Any] = {}
    for i, (name, param) in enumerate(list(inspect.signature(cls.__init__).parameters.items())[1:]):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        kind = str(param.annotation)
        kwargs[name] = (10 + i if "int" in kind else [{"problem": i}] if "list" in kind
                        else ("v", i) if "object" in kind else f"{name}-{i}")
    return cls(**kwargs)


def test_every_error_class_is_found() -> None:
    names = {c.__name__ for c in _error_classes()}
    assert {"InvalidPropertyError", "CorruptionError", "BadInputError", "DamageFoundError"} <= names
    assert all(getattr(store, n, c) is c for n, c in ((c.__name__, c) for c in _error_classes()))


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_error_round_trips_through_pickle(cls: type[E.StoreError]) -> None:
    error = _make(cls)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(error, protocol))
        assert type(back) is cls
        assert back.args == error.args
        assert str(back) == str(error)
        assert back.exit_code == error.exit_code
        assert vars(back) == vars(error) and vars(back)   # message, and arg, path, line, ...


def _raise_invalid_property() -> None:
    raise E.InvalidPropertyError("keys may not hold a space", "keys", "a b")


def _raise_corruption() -> None:
    raise E.CorruptionError("/s/commitlog/0", 4096, "bad magic")


@pytest.mark.parametrize("fn", [_raise_invalid_property, _raise_corruption])
def test_an_error_raised_in_a_process_pool_comes_back_as_itself(fn) -> None:  # type: ignore[no-untyped-def]
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with pytest.raises(E.StoreError) as info:
            pool.submit(fn).result()
    if fn is _raise_invalid_property:
        assert type(info.value) is E.InvalidPropertyError
        assert (info.value.message, info.value.arg, info.value.value) == ("keys may not hold a space", "keys", "a b")
    else:
        assert type(info.value) is E.CorruptionError
        assert (info.value.path, info.value.offset, info.value.reason) == ("/s/commitlog/0", 4096, "bad magic")
        assert str(info.value) == "/s/commitlog/0 at offset 4096: bad magic"


def _spark_text(error: E.StoreError) -> str:
    """How Spark carries a store error out of a task: the Python exception's line inside its own."""
    return (f"An error occurred while calling o62.count.\n: org.apache.spark.SparkException: Job aborted"
            f"\n[PYTHON_DATA_SOURCE_ERROR] Failed to read: store.errors.{type(error).__name__}: {error}\n"
            f"\tat org.apache.spark.sql.execution.python.PythonDataSource...")


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_a_store_error_carried_out_of_spark_is_raised_as_itself(cls: type[E.StoreError]) -> None:
    """``mqctl_errors`` (Python users) and the CLI's Spark boundary both give back the store's
    error, its class and message, for every class: not a TypeError for a class whose
    ``__init__`` takes more than the message (CorruptionError, InvalidPropertyError)."""
    from mqctl.sparkutil import to_store_error
    from store.spark import mqctl_errors, store_error
    error = _make(cls)
    with pytest.raises(E.StoreError) as info:
        with mqctl_errors():
            raise Exception(_spark_text(error))
    for back in (info.value, store_error(Exception(_spark_text(error))), to_store_error(Exception(_spark_text(error)))):
        assert type(back) is cls
        assert str(back) == str(error) and back.message == error.message and back.args == (str(error),)
        assert back.exit_code == error.exit_code


def test_an_unknown_error_name_in_spark_text_is_an_operation_error() -> None:
    from store.spark import store_error
    back = store_error(Exception("boom store.errors.NoSuchError: it broke"))
    assert type(back) is E.OperationError and str(back) == "it broke"
    assert store_error(Exception("no store error here")) is None
