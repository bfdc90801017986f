"""Where every file of a store lives. Only this module joins names into paths.

Every name that reaches a path has been validated (``names.py``): topic and group names and
client ids cannot contain ``/`` or be ``..``, so no path built here leaves the store.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from store.log.format import INDEX_REBUILD_MARKER, segment_name


def backup_of(path: Path) -> Path:
    """The previous version kept beside a file that is replaced whole (``NAME.bak``)."""
    return path.with_name(path.name + ".bak")


def lock_beside(path: Path) -> Path:
    """The sidecar lock file of a file that several processes rewrite (``NAME.lock``)."""
    return path.with_name(path.name + ".lock")


def segment_file(directory: Path, base: int) -> Path:
    """Segment ``base`` of the commit log, a consume queue or the key index in ``directory``
    (its name: ``format.segment_name``)."""
    return directory / segment_name(base)


# Spark's directories in the store (relative names: a staged job's path is named relative to the root)
SPARK_STAGING = "spark-staging"
SPARK_SINKS = "spark-sinks"


def rebuild_marker(index_dir: Path) -> Path:
    """``index/REBUILDING``: a rebuild of the key index in ``index_dir`` is under way (``indexfence.py``)."""
    return index_dir / INDEX_REBUILD_MARKER


def segment_file_s(directory: str, base: int) -> str:
    """:func:`segment_file` as a string, for the read and write paths that open by name."""
    return directory + "/" + segment_name(base)


@dataclass(frozen=True)
class Layout:
    """Every path of the store at ``root`` (the one place they are built)."""

    root: Path

    # -- store-wide files
    @property
    def store_json(self) -> Path:
        return self.root / "store.json"

    @property
    def write_lock(self) -> Path:
        return self.root / "lock"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def commitlog_dir(self) -> Path:
        return self.root / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return self.root / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def dlq_resend_json(self) -> Path:
        """What ``dlq resend`` has resent (``store/client/dlq.py``)."""
        return self.config_dir / "dlqResend.json"

    @property
    def spark_staging(self) -> Path:
        """``spark-staging/``: Spark writers' job directories before their commit (``store/spark/staging.py``)."""
        return self.root / SPARK_STAGING

    def spark_sink(self, sink_id: str) -> Path:
        """``spark-sinks/<id>.json``: a streaming sink's ledger of committed batches (``store/spark/sink.py``)."""
        return self.root / SPARK_SINKS / f"{sink_id}.json"

    @property
    def topics_json(self) -> Path:
        """The legacy one-file topic table (migrated to ``topics_dir`` by the first writer)."""
        return self.config_dir / "topics.json"

    @property
    def topics_json_migrated(self) -> Path:
        """Where the first writer moves ``topics_json`` once it has migrated it."""
        return self.config_dir / "topics.json.migrated"

    @property
    def topics_dir(self) -> Path:
        """``config/topics/``: one authoritative file per topic."""
        return self.config_dir / "topics"

    def topic_config(self, topic: str) -> Path:
        return self.config_dir / "topics" / f"{topic}.json"

    def topic_mirror(self, topic: str) -> Path:
        """The copy of a topic's config kept beside its consume queues."""
        return self.consumequeue_dir / topic / "topic.json"

    @property
    def topics_epoch(self) -> Path:
        """Replaced on every topic create, update and delete: one stat tells a change."""
        return self.config_dir / "topics.epoch"

    @property
    def consumer_offset_log(self) -> Path:
        """The offsets journal of which ``consumerOffset.json`` is the snapshot."""
        return self.config_dir / "consumerOffset.log"

    @property
    def consumer_offset_json(self) -> Path:
        return self.config_dir / "consumerOffset.json"

    @property
    def delay_offset_json(self) -> Path:
        return self.config_dir / "delayOffset.json"

    @property
    def commitlog_start_json(self) -> Path:
        """Where the commit log begins as retention left it (``store/log/logstart.py``)."""
        return self.config_dir / "commitlogStart.json"

    @property
    def known_damage_json(self) -> Path:
        """Damaged log ranges ``store recover`` reported (``store/log/knowndamage.py``)."""
        return self.config_dir / "knownDamage.json"

    # -- per topic / queue
    def queue_dir(self, topic: str, queue_id: int) -> Path:
        return self.consumequeue_dir / topic / str(queue_id)

    def topic_cq_dir(self, topic: str) -> Path:
        return self.consumequeue_dir / topic

    def queue_dir_names(self, topic: str, queues: int) -> list[str]:
        """:meth:`queue_dir` of queues ``0..queues-1`` as strings (one ``Path`` for all of them)."""
        base = f"{self.topic_cq_dir(topic)}/"
        return [base + str(q) for q in range(queues)]

    # -- consumer state
    @property
    def broadcast_offsets_root(self) -> Path:
        """``offsets/``: one directory per broadcast client id, one per group inside."""
        return self.root / "offsets"

    def broadcast_client_dir(self, client_id: str) -> Path:
        """``offsets/<clientId>/``: one directory per group the client consumes in broadcast."""
        return self.broadcast_offsets_root / client_id

    def broadcast_offsets(self, client_id: str, group: str) -> Path:
        """LocalFileOffsetStore's ``<dir>/<clientId>/<group>/offsets.json``."""
        return self.root / "offsets" / client_id / group / "offsets.json"

    @property
    def dedup_root(self) -> Path:
        return self.root / "dedup"

    @property
    def members_root(self) -> Path:
        """``consumers/``: one directory per group with live or leftover members."""
        return self.root / "consumers"

    def members_dir(self, group: str) -> Path:
        return self.root / "consumers" / group

    def member_lock(self, group: str, client_id: str) -> Path:
        """Held (``flock``) by a live member for as long as it lives."""
        return self.members_dir(group) / f"{client_id}.lock"

    def member_json(self, group: str, client_id: str) -> Path:
        """A member's published record (its subscriptions, pid, host)."""
        return self.members_dir(group) / f"{client_id}.json"

    def member_beat(self, group: str, client_id: str) -> Path:
        """A member's proof that it is not stuck (its mtime), in a subdirectory: renewing it
        wakes none of the members watching ``consumers/<group>/``."""
        return self.root / "consumers" / group / ".beats" / client_id

    @property
    def queue_locks_root(self) -> Path:
        """``locks/``: one directory per group that has taken a queue lock."""
        return self.root / "locks"

    def queue_locks_dir(self, group: str) -> Path:
        return self.root / "locks" / group

    def group_mutex(self, group: str) -> Path:
        """``locks/<group>/.mutex.lock``: the group's mutex over its queue locks (``group_mutex.py``)."""
        return self.queue_locks_dir(group) / ".mutex.lock"

    def topic_locks_dir(self, group: str, topic: str) -> Path:
        """``locks/<group>/<topic>/``: the group's queue locks of one topic."""
        return self.root / "locks" / group / topic

    def queue_lock(self, group: str, topic: str, queue_id: int) -> Path:
        return self.root / "locks" / group / topic / f"{queue_id}.lock"

    def dedup_log(self, group: str) -> Path:
        return self.dedup_root / f"{group}.log"

    def service_lock(self, name: str) -> Path:
        """Locks of store-wide services (delay scheduler, transaction check)."""
        return self.root / "services" / f"{name}.lock"

    def tx_dir(self) -> Path:
        return self.root / "tx"

    def tx_progress(self, group: str) -> Path:
        """``tx/<group>.json``: how far the transaction check service has read (``positions.py``)."""
        return self.tx_dir() / f"{group}.json"
