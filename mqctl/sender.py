"""``mqctl send``'s batcher: drafts gathered into batches, each batch one store write under
one lock (through :class:`store.Producer`'s batch calls), its results printed only after it is
stored — so a printed result means the message survives a crash of this process (with
``--flush sync``, of the machine too: the producer's group commit prints a batch's results
once a background fsync covers it).
"""
from __future__ import annotations

import binascii
import json as jsonlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

from mqctl import errors, msgargs
from mqctl.msgargs import JSON_FIELDS, json_body, json_msg_id, json_properties, message_properties, unescape
from mqctl.output import BrokenPipe  # (loaded anyway: mqctl.errors.guard catches it)
from mqctl.sendlost import stdout_failed
from mqctl.stdin import LongRecord, line_cap, read_chunks

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from datetime import timedelta
    from typing import Literal, Optional

    from mqctl.state import State
    from store import BatchResult, Draft, SendResult

BATCH_MESSAGES = 8192
# A batch's bytes stay in the CPU's caches from the stdin read through the CRC to the write
# (2 MiB: a core's L2 here); 8 MiB batches of 64 KiB bodies were written about 1.5x slower.
BATCH_BYTES = 2 * 1024 * 1024
# A read of stdin this big: big reads and batches follow (the allocator keeps their memory)
BIG_READ = 64 * 1024


@dataclass
class SendRequest:
    """What one ``mqctl send`` was asked to do (its flags, as parsed)."""

    topic: str
    body: str | None = None
    tag: str | None = None
    keys: str | None = None
    properties: list[str] = field(default_factory=list)
    sharding_key: str | None = None
    queue: int | None = None
    key_delimiter: str | None = None
    delimiter: str | None = None
    input: Literal["raw", "json"] = "raw"
    flush: Literal["async", "sync"] = "async"
    delay: str | None = None
    batch_size: int = BATCH_MESSAGES
    reroute: bool = False
    json: bool = False


def run_send(st: State, r: SendRequest) -> None:
    """Check the request, send BODY or stdin's records, print results and the summary."""
    from store import Prop, validate_topic
    from store.errors import UsageError
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C ends a send with exit 130 (after what was acknowledged is made durable, in ``finish``),
        # also when started with SIGINT ignored (a background job); SIGTERM likewise with 143, unless ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        errors.end_as_interrupt(signal.SIGTERM)
    validate_topic(r.topic)
    empty_key = r.sharding_key == ""
    if empty_key:
        r.sharding_key = None   # an empty key is no key: round-robin, refused on an ordered topic
    if r.sharding_key is not None and r.queue is not None:
        raise UsageError("give --sharding-key or --queue, not both")
    from_stdin = r.body is None or r.body == "-"
    if not from_stdin:
        for flag, given in (("--key-delimiter", r.key_delimiter is not None), ("--delimiter", r.delimiter is not None),
                            ("--input json", r.input == "json"), ("--reroute", r.reroute)):
            if given:
                raise UsageError(f"{flag} applies to messages read from stdin, not to a BODY argument")
    if r.key_delimiter is not None and (r.input == "json" or r.sharding_key is not None or r.queue is not None):
        raise UsageError("--key-delimiter applies to --input raw only" if r.input == "json" else
                         "--key-delimiter gives each line its own sharding key: not with --sharding-key or --queue")
    if r.reroute and r.input != "json":
        raise UsageError("--reroute applies to --input json (it ignores each line's queueId)")
    delim = unescape(r.delimiter if r.delimiter is not None else "\\n")
    if not delim:
        raise UsageError("--delimiter may not be empty")
    kd = unescape(r.key_delimiter, "--key-delimiter") if r.key_delimiter is not None else None
    if kd == b"":
        raise UsageError("--key-delimiter may not be empty")
    base_props = message_properties(r.properties, r.tag, r.keys, r.sharding_key)
    base_props.pop(Prop.SHARDING_KEY, None)   # the Sender routes each message by its own key
    deliver = None
    if r.delay is not None:   # (the scheduler's module only when asked for: start-up)
        from store import parse_delay
        deliver = parse_delay(r.delay)
    sender = Sender(st, r.topic, base_props, r.sharding_key, r.queue, r.flush == "sync", r.json, deliver)
    shape = sender.topic_shape() if empty_key and r.queue is None else None
    if shape is not None and shape[1]:
        raise UsageError(f"--sharding-key is empty: topic {r.topic!r} is ordered: give a non-empty key (-s) "
                         "or a queue (-q)")
    sender.batch_messages = r.batch_size
    sender.reroute = r.reroute
    sender.delay_text = (r.delay or "").strip()
    finished = False
    try:
        if not from_stdin:
            assert r.body is not None
            sender.add_raw(os.fsencode(r.body), 0)   # the argument's bytes, UTF-8 or not; line 0: BODY
        else:
            fd = sys.stdin.fileno()
            if os.isatty(fd):   # a person at a terminal: say what the silence is
                sender.typed = True   # (and no rate of lines typed)
                what = "JSON objects" if r.input == "json" else "messages"
                sep = "one per line" if delim == b"\n" else f"separated by {r.delimiter}"
                sys.stderr.write(f"mqctl: reading {what} from stdin, {sep} (Ctrl-D to end)\n")
                sys.stderr.flush()
            from mqctl.startgc import release
            release()   # (the store is open: collect again while stdin is read, mqctl/startgc.py)
            line = 0
            fast = r.input == "raw" and kd is None and deliver is None
            tuned = False
            try:
                cap = line_cap(sender.max_size, r.input == "json", kd)
                for records, more in read_chunks(fd, delim, zero_copy=fast, cap=cap):
                    if not tuned and sum(map(len, records)) >= BIG_READ:
                        # Big read blocks and batch buffers follow: reuse their memory, not
                        # faulted in anew. (Not before: a few lines read at once do not pay for
                        # loading ctypes, ~1 ms of such a process.)
                        from mqctl.output import keep_big_buffers
                        keep_big_buffers()
                        tuned = True
                    if fast:
                        sender.add_bodies(records, line, more)
                        line += len(records)
                    else:
                        for rec in records:
                            line += 1
                            if r.input == "json":
                                sender.add_json(rec, line)
                            elif rec:
                                sender.add_raw(rec, line, kd)
                        sender.flush()
                    if not more:
                        sender.settle()
            except LongRecord as exc:
                sender.too_large(exc.size, line + 1, body=r.input == "raw" and kd is None, whole=exc.whole)
        sender.flush()
        finished = True
    finally:
        try:
            sender.finish()
        finally:
            sender.summary(finished)
            stdout_failed(sender)   # (what stdout did not get, if it failed: in mqctl/sendlost.py)


class Sender:
    """Accumulates drafts into batches and prints each batch's results."""

    def __init__(self, st: State, topic: str, props: dict[str, str], sharding_key: Optional[str],
                 queue: Optional[int], sync: bool, json: bool,
                 deliver: tuple[int, int] | None) -> None:
        from store import Draft, Producer, Prop
        self.Draft, self._skey_prop = Draft, Prop.SHARDING_KEY
        self.store = st.store(create=True)
        from mqctl.argnames import ARG_FLAGS
        self.producer = Producer.of(self.store, flush="sync" if sync else "async", group_commit=sync,
                                    arg_names=ARG_FLAGS)
        self.max_size = self.store.settings.max_message_size
        self.topic = topic
        self.props = props
        self.sharding_key = sharding_key
        self.queue = -1 if queue is None else queue
        self.sync = sync
        self.json = json
        self.deliver = deliver
        self.delay: int | timedelta | None = None   # deliver as Producer takes it
        if deliver is not None:
            from datetime import timedelta
            self.delay = deliver[0] or timedelta(milliseconds=deliver[1])
        self.batch: list[Draft] = []   # Drafts (json input, delays) ...
        self.batch_ids: dict[int, str] = {}   # ... the msgId of those (by place) whose line had one ...
        self.bodies: list[bytes] = []  # ... or bare bodies for the store's fast path
        self.skeys: list[str | None] | None = None
        self.batch_bytes = 0
        self.sent = 0
        self.queues: set[int] = set()
        self.due: tuple[int, int] | None = None   # --delay: the first and last delivery time
        self.utc = st.utc
        self.t0 = time.monotonic()
        self._shape: tuple[int, bool] | None = None
        self.batch_messages = BATCH_MESSAGES
        self.reroute, self.delay_text, self.typed = False, "", False   # typed: stdin is a terminal
        self.json_input = False
        self._key_room: int | None = None
        self.lost: OSError | None = None   # --json: stdout failed; results since are not printed
        self.unprinted, self.first_unprinted = 0, ""   # --json: results not written since stdout closed
        self.last_id = ""

    def topic_shape(self) -> tuple[int, bool] | None:
        """(queue count, ordered) of the topic, or what the first send will create; None when
        it does not exist and will not be created (the send then fails with exit 3). Lets a
        bad input line be refused by its line number, after the lines before it are sent."""
        if self._shape is None:
            cfg = self.store.find_topic(self.topic)
            if cfg is not None:
                self._shape = (cfg.queues, cfg.order)
            elif self.store.settings.auto_create_topics:
                self._shape = (self.store.settings.default_queues, False)
        return self._shape

    def _check_route(self, qid: int, skey: str | None) -> None:
        shape = self.topic_shape()
        if shape is None:
            return
        queues, ordered = shape
        if qid >= queues:
            hint = (" (to copy into a topic with fewer queues, add --reroute: lines are routed by "
                    "shardingKey instead of queueId)") if self.json_input else ""
            raise ValueError(f"queue {qid} does not exist: topic {self.topic!r} has queues 0-{queues - 1}{hint}")
        if ordered and qid < 0 and skey is None:
            raise ValueError(f"topic {self.topic!r} is ordered: give a sharding key or a queue id")

    def _check_size(self, body: bytes, line: int) -> None:
        if len(body) > self.max_size:
            self.too_large(len(body), line)

    def too_large(self, size: int, line: int, body: bool = True, whole: bool = True) -> None:
        """Refuse a message (``body``) or a line of stdin of ``size`` bytes (not ``whole``: more)."""
        from store.errors import MessageTooLargeError
        raise MessageTooLargeError(
            f"{f'line {line}' if line else 'BODY'}: {'message' if body else 'a line'} of {'' if whole else 'over '}"
            f"{size} bytes exceeds the store's limit of {self.max_size} bytes"
            f"{'' if body else ' for a message, whatever its key or encoding'}{self._sent_before(line)}")

    def _bad_line(self, message: str, line: int) -> Exception:
        from store.errors import BadInputError
        return BadInputError(f"{message}{self._sent_before(line)}", line=line)

    def _sent_before(self, line: int) -> str:
        """A bad line ends the input: what came before is sent, its results printed; say how many."""
        self.flush()
        self.settle()
        from mqctl.output import plural
        sent = f" ({plural(self.sent, 'message')} sent before it)" if self.sent else " (nothing was sent)"
        return sent if line else ""

    def _add(self, draft: Draft) -> None:
        self.batch.append(draft)
        self.batch_bytes += len(draft.body)
        if len(self.batch) >= self.batch_messages or self.batch_bytes >= BATCH_BYTES:
            self.flush()

    def add_bodies(self, records: list[bytes], first_line: int, more: bool = False) -> None:
        """Raw records with nothing per line to parse: straight into batches, sent when a
        batch is full or the input pauses (``more`` false). An oversized record stops the
        input there: what came before it is sent, then the error names it."""
        if max(map(len, records)) > self.max_size:
            i = next(i for i, r in enumerate(records) if len(r) > self.max_size)
            self._queue_bodies(records[:i], False)
            self._check_size(records[i], first_line + i + 1)
        self._queue_bodies(records, more)

    def _queue_bodies(self, records: list[bytes], more: bool) -> None:
        if b"" in records:
            records = [r for r in records if r]
        if not records:
            if not more:
                self.flush()
            return
        avg = max(1, sum(map(len, records)) // len(records))
        i, n = 0, len(records)
        while i < n:
            room = min(self.batch_messages - len(self.bodies),
                       max(1, (BATCH_BYTES - self.batch_bytes) // avg))
            part = records[i:i + room] if (i or room < n) else records
            if self.bodies:
                self.bodies.extend(part)
            else:
                self.bodies = part
            self.batch_bytes += len(part) * avg
            i += len(part)
            if len(self.bodies) >= self.batch_messages or self.batch_bytes >= BATCH_BYTES:
                self.flush()
        if not more:
            self.flush()

    def add_raw(self, body: bytes, line: int, key_delim: bytes | None = None) -> None:
        skey = self.sharding_key
        if key_delim is not None:
            k, sep, rest = body.partition(key_delim)
            if sep and k:
                skey, body = k.decode("utf-8", "replace"), rest
                from store import has_property_separator
                if has_property_separator(k):
                    raise self._bad_line("a sharding key may not contain the control characters \\x01 or \\x02",
                                         line)
                if 3 * len(k) > self.key_room():   # (a byte that is not UTF-8 is stored as U+FFFD: 3 bytes)
                    from store import Prop, check_properties_room
                    from store.errors import MessageTooLargeError
                    try:
                        check_properties_room({**self.props, Prop.SHARDING_KEY: skey})
                    except MessageTooLargeError as exc:
                        raise self._bad_line(exc.message, line) from exc
            else:
                if sep:
                    body = rest   # an empty key is no key (as a line without one)
                if skey is None and self.queue < 0:
                    try:
                        self._check_route(-1, None)
                    except ValueError as exc:
                        what = "an empty key" if sep else "no key"
                        raise self._bad_line(f"{what} before the key delimiter: {exc}", line) from exc
        if len(body) > self.max_size:
            self._check_size(body, line)
        if self.deliver is not None:
            props = dict(self.props)
            if skey is not None:
                props[self._skey_prop] = skey
            self._add(self.Draft(self.topic, body, props, self.queue, skey))
            return
        self.bodies.append(body)
        if skey is not None:
            if self.skeys is None:
                self.skeys = [None] * (len(self.bodies) - 1)
            self.skeys.append(skey)
        elif self.skeys is not None:
            self.skeys.append(None)
        self.batch_bytes += len(body)
        if len(self.bodies) >= self.batch_messages or self.batch_bytes >= BATCH_BYTES:
            self.flush()

    def key_room(self) -> int:
        """The longest sharding key (bytes) a line's message still has room for."""
        if self._key_room is None:
            from store import Prop, properties_room
            self._key_room = properties_room(self.props) - len(Prop.SHARDING_KEY) - 2
        return self._key_room

    def add_json(self, raw: bytes, line: int) -> None:
        from store import Prop, check_properties_room
        from store.errors import BadInputError, InvalidPropertyError, MessageTooLargeError
        if not raw.strip():
            return
        try:
            obj = jsonlib.loads(raw)
        except ValueError as exc:
            raise self._bad_line(f"not a JSON object: {exc}", line) from exc
        self.json_input = True
        try:
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            unknown = [k for k in obj if k not in JSON_FIELDS]
            if unknown:
                import difflib
                close = difflib.get_close_matches(unknown[0], sorted(JSON_FIELDS), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"unknown field {unknown[0]!r}{hint}; known fields: body, bodyEncoding, "
                                 "tags, keys, shardingKey, queueId, properties, and the other fields "
                                 "of the consume --json envelope (and of msg show and dlq list --json)")
            data = json_body(obj)
            props = {**self.props, **json_properties(obj)}
            # an empty key is no key: the line is routed as one without shardingKey
            key = props.pop(Prop.SHARDING_KEY, None)
            keyed = bool(key) and "shardingKey" in obj
            skey = key if keyed else self.sharding_key
            if "queueId" in obj and (self.reroute or msgargs.json_queue_elsewhere(obj)):
                qid = -1 if skey is not None or self.queue < 0 else self.queue
            elif "queueId" in obj:
                qid = obj["queueId"]
                if not isinstance(qid, int) or isinstance(qid, bool) or qid < 0:
                    raise ValueError("'queueId' must be a non-negative integer")
            else:
                qid = -1 if keyed else self.queue
            if skey is not None:
                props[Prop.SHARDING_KEY] = skey
            self._check_route(qid, skey)
            if self.props or (skey is not None and not keyed):   # (the line's own: json_properties)
                check_properties_room(props)   # else its batch's write refuses every line of it
            msg_id = json_msg_id(obj, self.topic)
        except (ValueError, binascii.Error) as exc:
            raise self._bad_line(str(exc), line) from exc
        except (BadInputError, InvalidPropertyError, MessageTooLargeError) as exc:
            raise self._bad_line(exc.message, line) from exc
        self._check_size(data, line)
        if msg_id is not None:
            self.batch_ids[len(self.batch)] = msg_id
        self._add(self.Draft(self.topic, data, props, qid, skey))

    def flush(self) -> None:
        """Write the pending batch. Its results are printed at once, or with ``--flush sync``
        once an fsync covers it (the producer's group commit: fsyncs run in a thread while
        this one goes on writing; a batch whose fsync fails is never printed, nor any after
        it, and the error ends the send)."""
        if self.bodies:
            bodies, self.bodies = self.bodies, []
            skeys, self.skeys = self.skeys, None
            if skeys is None and self.sharding_key is not None:
                # (the fast path of raw stdin lines keeps no list: one --sharding-key for all)
                skeys = [self.sharding_key] * len(bodies)
            self.batch_bytes = 0
            self.producer.send_bodies(self.topic, bodies, properties=self.props,
                                      queue=None if self.queue < 0 else self.queue, sharding_keys=skeys,
                                      on_durable=self._report_batch)
        if self.batch:
            batch, self.batch, self.batch_bytes, ids, self.batch_ids = self.batch, [], 0, self.batch_ids, {}
            self.producer.send_drafts(batch, delay=self.delay, on_durable=self._report_results,
                                      msg_ids=[ids.get(i) for i in range(len(batch))] if ids else None)

    def _report_batch(self, res: BatchResult) -> None:
        self._report(res.topic, res.queue_ids, res.queue_offsets, res.commitlog_offsets,
                     res.uniq_keys if self.json else None)

    def _report_results(self, results: list[SendResult]) -> None:
        # A parked message (--delay) reports the topic and queue it will be delivered to (the
        # store chose it when parking), no queue offset (it has none there yet), and when it
        # is due: not the schedule topic's own queue and offset.
        self._report(self.topic, [r.queue_id for r in results], [r.queue_offset for r in results],
                     [r.commitlog_offset for r in results], [r.msg_id for r in results],
                     [r.deliver_timestamp for r in results] if self.deliver is not None else None)

    def settle(self) -> None:
        """The input paused: make every written batch durable and print its results now,
        not when more input comes (``tail -f | mqctl send --flush sync`` acknowledges each
        message as soon as it is on disk)."""
        self.producer.settle()

    def finish(self) -> None:
        """Make every written batch durable and print its results."""
        self.producer.close()   # the store handle stays open: it is the run's

    def _report(self, topic: str, qids: list[int], qoffs: list[int] | list[int | None], physs: list[int],
                uks: list[str] | None, dues: list[int | None] | None = None) -> None:
        from store import offset_msg_id
        self.sent += len(qids)
        due_at = [d for d in dues or () if d is not None]
        if due_at:
            lo, hi = self.due or (min(due_at), max(due_at))
            self.due = (min(lo, *due_at), max(hi, *due_at))
        if self.json:
            t = jsonlib.dumps(topic)
            assert uks is not None   # passed whenever --json
            out = "".join(
                f'{{"status":"SEND_OK","msgId":"{uk}","offsetMsgId":"{offset_msg_id(p)}","topic":{t},'
                f'"queueId":{q},"queueOffset":{"null" if o is None else o},"commitLogOffset":{p}'
                f'{"" if due is None else f",{_DUE_FIELD}:{due}"}}}\n'
                for q, o, p, uk, due in zip(qids, qoffs, physs, uks, dues or [None] * len(qids)))
            self.last_id = uks[-1] if uks else self.last_id
            if self.lost is not None or self.unprinted:   # (durable after it failed: counted only)
                self.unprinted += len(qids)
                return
            try:
                sys.stdout.write(out)
                sys.stdout.flush()
            except BrokenPipe:   # (| head -1: exit 141, and the send's end names these, stored)
                self.unprinted, self.first_unprinted = len(qids), uks[0] if uks else ""
                raise
            except OSError as exc:
                # Closed (>&-) or gone: the messages are stored whatever happens now. Send no
                # more (whose results could not be printed either), and let the error say what
                # was stored, so a script that retries on failure does not send it twice.
                self.lost = exc
                raise self.results_lost() from exc
        else:
            self.queues.update(qids)

    def results_lost(self) -> Exception:
        from mqctl.sendlost import results_lost
        return results_lost(self.lost, self.sent, self.last_id)

    def summary(self, finished: bool = True) -> None:
        """The human line on stderr: ``sent 3 messages to orders (queues 0,1,2)``; after an
        error (``finished`` false) only when something was sent, the error says the rest."""
        if self.json or not (self.sent or finished):
            return
        if not self.sent:
            sys.stderr.write(f"sent 0 messages to {self.topic} (no input)\n")
            return
        from mqctl.output import plural
        dt = time.monotonic() - self.t0
        rate = f", {r:,.0f} msg/s" if dt > 0.5 and (r := self.sent / dt) >= 1 and not self.typed else ""
        qs = sorted(self.queues)
        where = (f"queue {qs[0]}" if len(qs) == 1 else f"queues {','.join(map(str, qs))}" if len(qs) <= 8
                 else plural(len(qs), "queue"))
        when = ""
        if self.due is not None and self.deliver is not None:
            from store import format_local
            lo, hi = self.due
            first, last = format_local(lo, self.utc), format_local(hi, self.utc)
            at = f"at {first}" if hi - lo < 1000 else f"from {first} to {last}"
            level, ms = self.deliver
            delay = f"delay level {level}: {msgargs.delay_level_text(ms)}" if level else f"a {self.delay_text} delay"
            when = f", due {at} ({delay})"
        sys.stderr.write(f"sent {plural(self.sent, 'message')} to {self.topic} ({where}){when}{rate}\n")


_DUE_FIELD = jsonlib.dumps("deliverTimestamp")
