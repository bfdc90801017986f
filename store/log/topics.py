"""Topic configuration: one checksummed file per topic, and its mirror.

Files (standard JSON, the fields of the broker's ``TopicConfigManager`` entries)::

    config/topics/<topic>.json          the authoritative copy
    consumequeue/<topic>/topic.json     its mirror, beside the topic's queue directories

        {"topicName": "<topic>", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6,
         "order": false, "createdAt": <ms>, "createdOffset": <commit-log end>,
         "state": "deleting",            (only while a deletion is in progress)
         "crc": <CRC-32 of the canonical content: fsutil.json_crc>}

    config/topics.epoch                 a token (ns), replaced on every create, update, delete
    config/topics.json                  RocketMQ's view of them all, derived (``topicsview.py``)

``createdOffset`` is the commit-log end when the topic was created: recovery never re-indexes
a record older than its topic, so a deleted and re-created topic does not resurrect old
messages. Changes are made under the store's write lock; each copy is written atomically and
durably (temp file, fsync, rename, directory fsync), the mirror first, so either copy heals
the other; then the view ``config/topics.json`` is rewritten (``topicsview.py``: never read as
truth; the epoch token is replaced before and after the topic's files, so a view written with
another token than the current one missed a change and is rewritten by the next writer).
A command reads only the files of the topics it uses; consumers notice any topic change with
one ``stat`` of the epoch file.

Creating a topic creates its queue directories too (``consumequeue/<topic>/<queueId>/``), so
the queue count can always be rebuilt: from the config; when it is damaged or missing, from
the mirror (its queue count, or more if more queue directories exist: an update that did not
finish writing both copies); when both are lost, from the directories alone (the highest
queue id + 1; the order flag is unknown and becomes false, with a warning naming the topic).

Deletion is crash-safe: the config is first marked ``"state": "deleting"`` (the topic no
longer exists for readers), then the queues and offsets go, then the file; recovery finishes
a marked deletion. Failpoint ``topic-save-before-view``: a topic's files written, its view not.

Legacy stores keep all topics in ``config/topics.json`` (``{"topicConfigTable": {...},
"dataVersion": {...}}``, with a ``.bak``; no ``derivedFrom``: not a view). The first writer
that opens such a store migrates it (each entry to its file, then ``topics.json`` renamed to
``topics.json.migrated``, and the view written in its place); until then readers that cannot
write read the legacy file.
"""
from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from store.errors import CorruptionError, UsageError, io_error
from store.failpoints import failpoint
from store.fsutil import (
    atomic_write_bytes,
    atomic_write_json_crc,
    crc_problem,
    ensure_dir,
    fsync_dir,
    json_problem,
    read_json_with_bak,
)
from store.layout import Layout
from store.log import filestat, topicsview
from store.log import format as F
from store.log.consumequeue import queue_ids

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Any

Warn = Callable[[str], None]
# The lowest commit-log offset the first entries of a topic's queues point at (None: empty).
FirstEntry = Callable[[str, list[int]], "int | None"]

DELETING = "deleting"
_SUFFIX = ".json"


@dataclass(frozen=True)
class TopicConfig:
    """A topic's configuration, as its config file holds it (the format at the top of this module)."""

    name: str
    queues: int
    order: bool = False
    created_at: int = 0
    created_offset: int = 0
    deleting: bool = False

    def unrouted(self, key: str = "", queue: str = "") -> UsageError:
        """The refusal of a message to this ordered topic with neither sharding key nor queue,
        naming the two as the caller spells them, if given (``sharding_key``, ``--sharding-key``)."""
        named = f"a sharding key ({key}) or a queue ({queue})" if key else "a sharding key or a queue"
        return UsageError(f"topic {self.name!r} is ordered: give {named}")

    def holds(self, commitlog_offset: int, queue_id: int) -> bool:
        """Whether a record of this topic's name at ``commitlog_offset`` in queue ``queue_id``
        is this topic's: stored since it was created, in a queue it has. A record of a topic
        deleted since (and maybe made anew) is not, though it stays in the log until
        retention (the rule ``recordscan.queue_runs`` applies to whole windows)."""
        return commitlog_offset >= self.created_offset and queue_id < self.queues

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "topicName": self.name, "readQueueNums": self.queues, "writeQueueNums": self.queues,
            "perm": 6, "order": self.order, "createdAt": self.created_at,
            "createdOffset": self.created_offset}
        if self.deleting:
            obj["state"] = DELETING
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicConfig:
        queues = int(obj["writeQueueNums"])
        if not 1 <= queues <= F.MAX_QUEUES:
            raise ValueError(f"queue count {queues} out of range")
        return cls(name=str(obj["topicName"]), queues=queues, order=bool(obj.get("order", False)),
                   created_at=int(obj.get("createdAt", 0)), created_offset=int(obj.get("createdOffset", 0)),
                   deleting=obj.get("state") == DELETING)


def read_topic_file(path: Path, name: str) -> TopicConfig | str:
    """The config in ``path``, or why it cannot be trusted (missing, unparsable, bad crc)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        return f"not valid JSON ({exc})"
    why = crc_problem(obj)
    if why is not None:
        return why
    try:
        cfg = TopicConfig.from_json(obj)
    except (ValueError, KeyError, TypeError) as exc:
        return f"bad field ({exc})"
    if cfg.name != name:
        return f"names topic {cfg.name!r}"
    return cfg


def _state(why: str) -> str:
    """A topic file's problem (:func:`read_topic_file`'s reason) as the end of a sentence."""
    return "is missing" if why == "missing" else f"cannot be trusted ({why})"


def _validate_legacy(obj: Any) -> None:
    if not isinstance(obj, dict) or not isinstance(obj.get("topicConfigTable"), dict):
        raise ValueError("no topicConfigTable object")
    for v in obj["topicConfigTable"].values():
        TopicConfig.from_json(v)


def legacy_file_problem(path: Path) -> str | None:
    """Why the legacy ``topics.json`` (or its ``.bak``) cannot be read, or None (``store check``)."""
    return json_problem(path, _validate_legacy)


class TopicTable:
    """The topics of one store: single-topic reads cached by ``stat``, listings, and the
    writes (caller holds the store's write lock)."""

    def __init__(self, layout: Layout, warn: Warn | None = None) -> None:
        self.layout = layout
        self.warn = warn
        self._one: dict[str, tuple[tuple[int, int, int], TopicConfig, bool]] = {}
        # Each topic's config path as a string, made once: a send looks its topic up twice
        # (before the lock and under it), and building the path cost as much as the stat.
        self._paths: dict[str, str] = {}
        self._legacy_stamp: tuple[int, int, int] | None = None
        self._legacy: dict[str, TopicConfig] = {}
        self._told: set[str] = set()   # the damage warned of (once per handle, however often it is read)
        self.view = topicsview.TopicsView(
            layout.topics_json, layout.topics_dir, lambda: {n: (c.queues, c.order) for n, c in self.all().items()},
            self.epoch_token)

    # -- reads -----------------------------------------------------------------------------
    def legacy(self) -> bool:
        """The store still keeps its topics in ``config/topics.json`` (not migrated yet): the
        file is there and is not the view (``topicsview.py``). One ``stat`` when unchanged."""
        return self.view.is_legacy()

    def _config_path(self, name: str) -> str:
        path = self._paths.get(name)
        if path is None:
            path = self._paths[name] = str(self.layout.topic_config(name))
        return path

    def get(self, name: str) -> TopicConfig | None:
        """The topic's config (None: no such topic, or one being deleted). One ``stat`` when
        the file did not change since the last call."""
        stamp = filestat.stamp(self._config_path(name))
        if stamp is None:
            if self.legacy():
                return self._legacy_table().get(name)
            # A config lost on its own (its copy beside the queues is written first and
            # removed first): the copy stands in until recovery or the next send restores it.
            mirror = read_topic_file(self.layout.topic_mirror(name), name)
            return mirror if isinstance(mirror, TopicConfig) and not mirror.deleting else None
        hit = self._one.get(name)
        if hit is not None and hit[0] == stamp:
            cfg = hit[1]
        else:
            found = self._read(name)
            if found is None:
                return None
            cfg = found[0]
            self._one[name] = (stamp, cfg, found[1])
        return None if cfg.deleting else cfg

    def get_trusted(self, name: str) -> TopicConfig | None:
        """The topic's config when it comes from its own intact config file, as a writer may
        use it; None otherwise (no such topic, one being deleted, or a config that is missing
        or damaged: the writer restores it). One ``stat`` when the file did not change since
        the last call: a file replaced by another writer (every change renames a new file
        into place) has another inode or mtime, and is read again."""
        stamp = filestat.stamp(self._config_path(name))
        if stamp is None:
            return None
        hit = self._one.get(name)
        if hit is None or hit[0] != stamp:
            found = self._read(name)
            if found is None:
                return None
            hit = self._one[name] = (stamp, found[0], found[1])
        return hit[1] if hit[2] and not hit[1].deleting else None

    def _read(self, name: str) -> tuple[TopicConfig, bool] | None:
        """(config, from its own file) — else from its copy, else from its queue directories."""
        got = read_topic_file(self.layout.topic_config(name), name)
        if isinstance(got, TopicConfig):
            return got, True
        where = self.layout.topic_config(name)
        mirror = read_topic_file(self.layout.topic_mirror(name), name)
        if isinstance(mirror, TopicConfig):
            if got != "missing":
                self._tell(f"{where} {_state(got)}; using its copy {self.layout.topic_mirror(name)} "
                           f"(mqctl store recover repairs it)")
            return mirror, False
        qids = queue_ids(self.layout, name)
        if got != "missing":
            self._tell(f"{where} {_state(got)}, and its copy {self.layout.topic_mirror(name)} {_state(mirror)}" + (
                f"; using its {qids[-1] + 1} queue directories (mqctl store recover repairs it)" if qids else ""))
        if qids:
            return TopicConfig(name, qids[-1] + 1), False
        return None

    def _tell(self, message: str) -> None:
        if self.warn is not None and message not in self._told:
            self._told.add(message)
            self.warn(message)

    def all(self) -> dict[str, TopicConfig]:
        """Every topic, by name (a listing of ``config/topics/``, and of the copies beside the
        queues of topics whose config is lost, ``config/topics/`` itself included: every
        reader of one topic finds it so, :meth:`get`)."""
        if self.legacy():
            return dict(self._legacy_table())
        entries = _listdir(self.layout.topics_dir)
        out: dict[str, TopicConfig] = {}
        for entry in entries:
            if entry.startswith(".") or not entry.endswith(_SUFFIX):
                continue   # a writer's temp file
            name = entry[: -len(_SUFFIX)]
            found = self._read(name)
            if found is not None and not found[0].deleting:
                out[name] = found[0]
        # a config lost on its own: its copy beside the queues stands in (as in get)
        for name in _listdir(self.layout.consumequeue_dir):
            if name not in out and f"{name}{_SUFFIX}" not in entries and not name.startswith("."):
                mirror = read_topic_file(self.layout.topic_mirror(name), name)
                if isinstance(mirror, TopicConfig) and not mirror.deleting:
                    out[name] = mirror
        return out

    def _legacy_table(self) -> dict[str, TopicConfig]:
        stamp = filestat.stamp(self.layout.topics_json)
        if stamp is None or stamp != self._legacy_stamp:
            obj = read_json_with_bak(self.layout.topics_json, default={"topicConfigTable": {}},
                                     validate=_validate_legacy, warn=self.warn)
            self._legacy = {k: TopicConfig.from_json(v) for k, v in obj["topicConfigTable"].items()}
            self._legacy_stamp = stamp
        return self._legacy

    def is_deleting(self, name: str) -> bool:
        """The topic's deletion was started and not finished (a crash in between)."""
        cfg = read_topic_file(self.layout.topic_config(name), name)
        return isinstance(cfg, TopicConfig) and cfg.deleting

    # -- writes (store write lock held) ----------------------------------------------------
    def save(self, cfg: TopicConfig) -> None:
        """Write the topic's queue directories, its mirror, then its config; then the epoch
        and the view (the epoch is replaced before too: see the top of this module)."""
        legacy = self.legacy()   # (migrating: the legacy file is still there, no view yet)
        ensure_dir(self.layout.topics_dir)
        base = None if legacy else self.view.current()
        if not legacy:
            self.touch_epoch()
        cq = self.layout.topic_cq_dir(cfg.name)
        if not cfg.deleting:
            ensure_dir(cq)
            existing = set(queue_ids(self.layout, cfg.name))
            missing = [q for q in range(cfg.queues) if q not in existing]
            for q in missing:
                ensure_dir(self.layout.queue_dir(cfg.name, q), durable=False)
            if missing:
                fsync_dir(cq)   # one fsync for every new queue directory
            atomic_write_json_crc(self.layout.topic_mirror(cfg.name), cfg.to_json(), keep_bak=False)
        atomic_write_json_crc(self.layout.topic_config(cfg.name), cfg.to_json(), keep_bak=False)
        self._one.pop(cfg.name, None)
        token = self.touch_epoch()
        if not legacy:
            failpoint("topic-save-before-view")
            self.view.write(token, base=base, name=cfg.name, shape=None if cfg.deleting else (cfg.queues, cfg.order))

    def mark_deleting(self, cfg: TopicConfig) -> None:
        self.save(replace(cfg, deleting=True))

    def remove(self, name: str) -> None:
        """The last step of a deletion: the config file goes (queues and offsets went first)."""
        try:
            os.unlink(self.layout.topic_config(name))
        except FileNotFoundError:
            pass
        fsync_dir(self.layout.topics_dir)
        self._one.pop(name, None)
        base = self.view.current()
        self.view.write(self.touch_epoch(), base=base, name=name)

    def discard_new(self, name: str) -> None:
        """Undo a creation whose :meth:`save` failed part-way (a full disk: the config written,
        the epoch not): the config goes, so no topic without its mirror and queues is left."""
        try:
            os.unlink(self.layout.topic_config(name))
        except FileNotFoundError:
            return
        self._one.pop(name, None)
        fsync_dir(self.layout.topics_dir)

    def touch_epoch(self) -> str:
        """Replace the epoch token; returns the new one. A change signal only: nothing is lost
        if a power cut keeps the old token (recovery after a restart compares the view whole)."""
        token = str(time.time_ns())
        atomic_write_bytes(self.layout.topics_epoch, f"{token}\n".encode(), keep_bak=False, sync=False)
        return token

    def epoch_token(self) -> str:
        """The epoch token; "" when there is none to read (missing, or not a file: a change
        signal only, so readers then compare the view whole)."""
        try:
            fd = os.open(self.layout.topics_epoch, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return ""
        try:
            return os.read(fd, 64).decode("ascii", "replace").strip()
        except OSError:
            return ""
        finally:
            os.close(fd)

    def epoch_stamp(self) -> tuple[int, int, int] | None:
        return filestat.stamp(self.layout.topics_epoch)

    # -- rebuilding ------------------------------------------------------------------------
    def rebuild(self, name: str, first_entry: FirstEntry, log_end: int) -> TopicConfig | None:
        """What the files beside a topic's queues say its config is (its config file being
        damaged or missing): the mirror, else the queue directories. None: nothing there."""
        qids = queue_ids(self.layout, name)
        mirror = read_topic_file(self.layout.topic_mirror(name), name)
        if isinstance(mirror, TopicConfig):
            queues = max(mirror.queues, qids[-1] + 1 if qids else 0)
            return replace(mirror, queues=queues, deleting=False)
        if not qids:
            return None
        first = first_entry(name, qids)
        if self.warn is not None:
            self.warn(f"topic {name!r}: its config and its copy are lost; rebuilt from its queue "
                      f"directories with {qids[-1] + 1} queue(s), order unknown (set to false)")
        return TopicConfig(name, qids[-1] + 1, False, int(time.time() * 1000),
                           log_end if first is None else first)

    def heal(self, first_entry: FirstEntry, log_end: int) -> list[str]:
        """Repair every topic (recovery, write lock held): a damaged or missing config is
        rebuilt (:meth:`rebuild`), a damaged or missing mirror is rewritten. Returns the
        topics whose deletion must be finished."""
        if self.legacy():
            self.migrate(first_entry, log_end)
        names = {e[: -len(_SUFFIX)] for e in _listdir(self.layout.topics_dir)
                 if e.endswith(_SUFFIX) and not e.startswith(".")}
        names |= {e for e in _listdir(self.layout.consumequeue_dir) if not e.startswith(".")}
        doomed = []
        for name in sorted(names):
            got = read_topic_file(self.layout.topic_config(name), name)
            if isinstance(got, TopicConfig):
                if got.deleting:
                    doomed.append(name)
                elif read_topic_file(self.layout.topic_mirror(name), name) != got:
                    self.save(got)
                continue
            cfg = self.rebuild(name, first_entry, log_end)
            if cfg is None:
                continue
            if self.warn is not None and got != "missing":
                self.warn(f"{self.layout.topic_config(name)} {_state(got)}; restored "
                          f"({cfg.queues} queue(s){', ordered' if cfg.order else ''})")
            self.save(cfg)
        epoch = self.layout.topics_epoch
        if _not_a_file(epoch):   # (a change signal only: put aside, nothing of it read)
            aside = epoch.with_name(f"{epoch.name}.not-a-file.{time.time_ns()}")
            try:
                os.rename(epoch, aside)
            except OSError as exc:
                raise io_error(exc, f"move {epoch} aside") from exc
            if self.warn is not None:
                self.warn(f"{epoch} was not a file: moved aside to {aside.name}, a new one written")
            self.touch_epoch()
        return doomed

    def migrate(self, first_entry: FirstEntry, log_end: int) -> None:
        """Move a legacy ``topics.json`` to one file per topic (write lock held). A damaged
        table (and ``.bak``) still migrates: what it lost is rebuilt from the queues."""
        try:
            legacy = dict(self._legacy_table())
        except CorruptionError as exc:
            if self.warn is not None:
                self.warn(f"{exc}; topics are rebuilt from their queue directories")
            legacy = {}
        for name, cfg in sorted(legacy.items()):
            if not isinstance(read_topic_file(self.layout.topic_config(name), name), TopicConfig):
                self.save(cfg)
        for name in sorted(_listdir(self.layout.consumequeue_dir)):
            if name not in legacy and not name.startswith("."):
                if not isinstance(read_topic_file(self.layout.topic_config(name), name), TopicConfig):
                    found = self.rebuild(name, first_entry, log_end)
                    if found is not None:
                        self.save(found)
        ensure_dir(self.layout.topics_dir)
        src = self.layout.topics_json
        os.replace(src, self.layout.topics_json_migrated)
        fsync_dir(src.parent)
        self.view.write(self.touch_epoch())

    # -- check (read-only) -----------------------------------------------------------------
    def problems(self) -> list[tuple[str, str]]:
        """(file, reason) of every damaged or missing topic file, and of queue directories
        that no topic owns."""
        if self.legacy():
            return []
        out = []
        configs = {e[: -len(_SUFFIX)] for e in _listdir(self.layout.topics_dir)
                   if e.endswith(_SUFFIX) and not e.startswith(".")}
        for name in sorted(configs):
            got = read_topic_file(self.layout.topic_config(name), name)
            mirror = read_topic_file(self.layout.topic_mirror(name), name)
            if isinstance(got, str):
                out.append((str(self.layout.topic_config(name)),
                            f"topic config {_state(got)} (run mqctl store recover)"))
                if isinstance(mirror, str):   # (both lost: the queue directories stand in)
                    out.append((str(self.layout.topic_mirror(name)),
                                f"topic copy {_state(mirror)} too (run mqctl store recover)"))
            elif got.deleting:
                out.append((str(self.layout.topic_config(name)), "topic deletion did not finish "
                                                                 "(run mqctl store recover)"))
            elif isinstance(mirror, str):
                out.append((str(self.layout.topic_mirror(name)),
                            f"topic copy {_state(mirror)} (run mqctl store recover)"))
        if _not_a_file(self.layout.topics_epoch):
            out.append((str(self.layout.topics_epoch), "not a file (the topics' change signal: mqctl store "
                                                       "recover moves it aside and writes a new one)"))
        for name in sorted(set(_listdir(self.layout.consumequeue_dir)) - configs):
            if queue_ids(self.layout, name):
                out.append((str(self.layout.topic_cq_dir(name)),
                            "consume queues of a topic without a config (run mqctl store recover)"))
        return out


def _not_a_file(path: Path) -> bool:
    """Whether something other than a regular file is at ``path`` (nothing there is fine)."""
    try:
        return not stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
