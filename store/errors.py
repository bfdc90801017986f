"""The store's error catalogue.

Every failure the store reports is a ``StoreError``. The subclasses are grouped by what a
caller can do about them, and each group carries the exit code the command-line contract
gives it (``exit_code``), so the CLI needs a single ``except StoreError`` to map them:

====================  ====  ==========================================================
group                 code  meaning
====================  ====  ==========================================================
``OperationError``       1  the operation ran and failed (a handler gave up, damage found,
                            an I/O error such as a full disk)
``UsageError``           2  a bad name, value or combination of arguments
``NotFoundError``        3  store, topic, group, message or transaction does not exist
``ConflictError``        4  a lock is held elsewhere, a state forbids the change
``DataError``            5  a corrupt file that could not be recovered, a message too
                            large, a malformed input record
====================  ====  ==========================================================
"""
from __future__ import annotations

import errno
import os
import sys

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any


class StoreError(Exception):
    """Base of every error raised by the store. ``exit_code`` is the contract's code."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as its class, ``args`` and attributes, rebuilt without calling ``__init__``:
        # the subclasses whose ``__init__`` takes other arguments than ``args`` (``path,
        # offset, reason``) then come back whole from a process pool's worker, with
        # ``message``, ``line``, ``problems`` and the rest, instead of failing to unpickle.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[StoreError], args: tuple[Any, ...], state: dict[str, Any]) -> StoreError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


def from_text(name: str, message: str) -> StoreError:
    """The error a ``store.errors.<name>: <message>`` line names (the one a Spark task's
    failure carries), as its own class: ``OperationError`` when ``name`` is none of the
    store's. Built as unpickling builds it, without ``__init__`` (``CorruptionError`` takes
    ``path, offset, reason``): ``message`` and ``args`` as read; the attributes the text does
    not carry (``path``, ``arg``, ``line``, ``problems``, ...) are None."""
    cls = globals().get(name)
    if not (isinstance(cls, type) and issubclass(cls, StoreError)):
        cls = OperationError
    code = cls.__init__.__code__
    state: dict[str, Any] = dict.fromkeys(code.co_varnames[1:code.co_argcount])
    state["message"] = message
    return _rebuild(cls, (message,), state)


# -- 1: the operation failed ---------------------------------------------------------------

class OperationError(StoreError):
    """Raised when an operation ran and failed for a reason other than bad input."""

    exit_code = 1


class StoreIOError(OperationError):
    """Raised when the file system refuses a read or write (full disk, file size limit,
    read-only or unwritable directory). Nothing partial is left visible."""


class DamageFoundError(OperationError):
    """Raised by ``store check`` when it found damage (listed in ``problems``)."""

    def __init__(self, message: str, problems: list[Any] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class HandlerError(OperationError):
    """Raised when a handler command could not be started or the consumer gave up."""


# -- 2: usage --------------------------------------------------------------------------------

class UsageError(StoreError):
    """Raised for a bad name, value or combination of options."""

    exit_code = 2


class InvalidNameError(UsageError):
    """Raised when a topic or group name breaks the naming rules or is reserved."""


class InvalidPropertyError(UsageError):
    """Raised when a message's tags, keys, sharding key or a user property may not be stored.
    ``arg`` is the argument's Python name (``tags``, ``keys``, ``properties``,
    ``sharding_key``) and ``value`` the offending input as given."""

    def __init__(self, message: str, arg: str, value: object) -> None:
        super().__init__(message)
        self.arg = arg
        self.value = value


# -- 3: not found ----------------------------------------------------------------------------

class NotFoundError(StoreError):
    """Raised when something named does not exist."""

    exit_code = 3


class StoreNotFoundError(NotFoundError):
    """Raised when a command that reads finds no store at the selected path."""


class TopicNotFoundError(NotFoundError):
    """Raised when a topic does not exist (and may not be auto-created here). ``topic`` names
    it when a send refused to create it (:func:`topic_not_created`), None otherwise."""

    def __init__(self, message: str, topic: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic


def topic_not_created(topic: str) -> TopicNotFoundError:
    """A send's refusal to create ``topic`` because auto-creation is off (the store's
    ``auto_create_topics`` setting, or its caller's): the fact, and ``topic`` set, so that a
    command line can say how its own users create one."""
    return TopicNotFoundError(f"topic {topic!r} does not exist, and topics are not created on send "
                              f"here (auto_create_topics is off): create it first", topic)


class GroupNotFoundError(NotFoundError):
    """Raised when a consumer group has no offsets, members or dead letters in the store."""


class MessageNotFoundError(NotFoundError):
    """Raised when no message has the given id (offset id or unique key)."""


class TransactionNotFoundError(NotFoundError):
    """Raised when no half message matches the transaction id."""


# -- 4: conflict -----------------------------------------------------------------------------

class ConflictError(StoreError):
    """Raised when the current state of the store forbids the change."""

    exit_code = 4


class TopicExistsError(ConflictError):
    """Raised when a topic exists with a different queue count."""


class LockHeldError(ConflictError):
    """Raised when a lock is held by another live process."""


class ClientIdInUseError(ConflictError):
    """Raised when a consumer starts with a client id that a live member already uses."""


class TransactionStateError(ConflictError):
    """Raised when a transaction was already resolved the other way."""


# -- 5: data ---------------------------------------------------------------------------------

class DataError(StoreError):
    """Raised for damaged or unacceptable data."""

    exit_code = 5


class CorruptionError(DataError):
    """Raised when a file is damaged in a way recovery cannot repair (never for a torn tail,
    which recovery cuts off). ``path`` and ``offset`` locate the damage."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path} at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class MessageTooLargeError(DataError):
    """Raised when a body exceeds the store's maximum message size."""


class BadInputError(DataError):
    """Raised when an input record (an NDJSON line, a property) is malformed. ``line`` is the
    1-based input line number, when there is one."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line


# -- not errors: warnings and notices ----------------------------------------------------------
#
# The library's one channel. A program that set up logging (a handler on the ``store`` logger or
# above it: ``logging.basicConfig()``, a framework's, pytest's) gets each warning as a record of
# the ``store`` logger at WARNING, each notice at INFO, for its handlers and levels to route,
# format or drop, as from any Python library (``logging.getLogger("store").addHandler(
# logging.NullHandler())`` silences them). A program that set up none gets the line the command
# line writes, ``mqctl: warning: MESSAGE`` on stderr, where logging's own last resort would print
# the bare message. ``logging`` is not imported for this (a program that set it up imported it):
# a send or a consume that warns of nothing never loads it. ``mqctl`` gives its store handles
# :func:`say` instead: its lines are its own whatever logging says.

LOGGER = "store"


def warn(message: str) -> None:
    """Warn through the library's channel (above): the default ``warn`` of a store handle, and
    what warns without a handle. ``Store.open(path, warn=...)`` sends a handle's elsewhere."""
    _tell("warning", message, 30)   # (logging.WARNING)


def notice(message: str) -> None:
    """A fact worth a line that is no problem (a Spark executor reading without ``isal``, the
    JVM reader not built): the same channel, at INFO."""
    _tell("notice", message, 20)    # (logging.INFO)


def say(kind: str, message: str) -> None:
    """``mqctl: KIND: MESSAGE`` on stderr, whatever logging says: the command line's lines, and
    the channel's when the program set up no logging."""
    try:
        sys.stderr.write(f"mqctl: {kind}: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):   # stderr closed or full: a warning has nowhere else to go
        pass


def _tell(kind: str, message: str, level: int) -> None:
    logging = sys.modules.get("logging")
    if logging is not None:
        logger = logging.getLogger(LOGGER)
        if logger.hasHandlers():
            logger.log(level, "%s", message, stacklevel=3)   # (the record names who warned)
            return
    say(kind, message)


def naming(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """``exc`` again, naming ``path``: a read's or a look's error on a descriptor names no file
    ("Is a directory" alone, for a segment replaced by a directory), and the CLI's one mapper
    says which file only when the error names it (``cannot access PATH: ...``, exit 1)."""
    if exc.filename is not None:
        return exc
    return type(exc)(exc.errno, exc.strerror, os.fspath(path))


def io_error(exc: OSError, what: str) -> StoreIOError:
    """Turn an OSError into the store's one-line I/O error."""
    reason = {
        errno.ENOSPC: "no space left on device",
        errno.EDQUOT: "disk quota exceeded",
        errno.EFBIG: "file size limit exceeded",
        errno.EROFS: "read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    return StoreIOError(f"cannot {what}: {reason}")
