"""Exactly-once stages from outside: ``mqctl consume SRC -g G --to DST``, with and
without ``--exec``, as real ``mqctl`` processes on a real store. DST must hold each output
once, only outputs of handler runs that succeeded, in their inputs' queue order, and the
group's offsets must say so everywhere they are shown."""
from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import store
from tests.procs import MQ, finish, handler_script, one_error, python, wait_for


def read_all(mq: MQ, topic: str) -> list[dict]:
    """Every message of ``topic``, through a fresh group."""
    return mq.drain(topic, mq.fresh("reader"))


def send_keyed(mq: MQ, topic: str, n: int, keys: int = 5) -> list[str]:
    """``n`` messages with sharding keys ``k0..k{keys-1}``, bodies ``k<i>-<seq>``."""
    lines = [json.dumps({"body": f"k{i % keys}-{i:05d}", "shardingKey": f"k{i % keys}",
                         "keys": [f"id{i}"], "tags": "T"}) for i in range(n)]
    mq.ok("send", topic, "--input", "json", input="\n".join(lines) + "\n")
    return [json.loads(line)["body"] for line in lines]


def committed(mq: MQ, group: str, topic: str) -> int:
    """The group's committed offsets on ``topic``, summed, as ``offsets show`` reads them (the
    offsets file itself absorbs a stage's commits only once they are durable)."""
    res = mq.run("offsets", "show", "-g", group, "--topic", topic, "--json")
    if res.returncode == 3:
        return 0
    assert res.returncode == 0, str(res)
    return sum(r["offset"] for r in res.json_lines())


def per_queue(msgs: list[dict]) -> dict[int, list[str]]:
    out: dict[int, list[tuple[int, str]]] = {}
    for m in msgs:
        out.setdefault(m["queueId"], []).append((m["queueOffset"], m["body"]))
    return {q: [b for _o, b in sorted(v)] for q, v in out.items()}


def per_key(msgs: list[dict]) -> dict[str, list[str]]:
    """Bodies per sharding key, in queue order (a key stays in one queue)."""
    out: dict[str, list[str]] = {}
    for m in sorted(msgs, key=lambda m: (m["queueId"], m["queueOffset"])):
        out.setdefault(m.get("shardingKey") or "", []).append(m["body"])
    return out


def once_each(got: list[str], want: list[str]) -> None:
    dups = [b for b, n in Counter(got).items() if n > 1]
    assert not dups, f"{len(dups)} outputs more than once, e.g. {dups[:5]}"
    assert sorted(got) == sorted(want), (f"missing {sorted(set(want) - set(got))[:5]}, "
                                         f"foreign {sorted(set(got) - set(want))[:5]}")


@pytest.fixture
def src(mq: MQ) -> list[str]:
    mq.ok("topic", "create", "A", "--queues", "4")
    mq.ok("topic", "create", "B", "--queues", "4")
    return send_keyed(mq, "A", 200)


def test_copy_is_exactly_once_and_keeps_keys_tags_and_sharding(mq: MQ, src: list[str]) -> None:
    mq.ok("consume", "A", "-g", "copy", "--from", "first", "-e", "--to", "B")
    got = read_all(mq, "B")
    once_each([m["body"] for m in got], src)
    first = next(m for m in got if m["body"] == src[7])
    assert (first["keys"], first["tags"], first["shardingKey"]) == (["id7"], "T", "k2")
    # a key's messages stay in order (the sharding key picks DST's queue)
    assert per_key(got) == {k: [b for b in src if b.startswith(k + "-")] for k in per_key(got)}
    # run again: everything is committed, nothing is copied twice
    mq.ok("consume", "A", "-g", "copy", "--from", "first", "-e", "--to", "B")
    assert len(read_all(mq, "B")) == len(src)


def test_offsets_show_progress_and_the_offsets_file_include_the_stage(mq: MQ, src: list[str]) -> None:
    mq.ok("consume", "A", "-g", "copy", "--from", "first", "-e", "--to", "B")
    want = {q: row["maxOffset"] for q, row in
            ((r["queueId"], r) for r in mq.ok("topic", "status", "A", "--json").json_lines())}
    shown = {r["queueId"]: r["offset"] for r in
             mq.ok("offsets", "show", "-g", "copy", "--topic", "A", "--json").json_lines()}
    assert shown == want
    prog = [r for r in mq.ok("progress", "-g", "copy", "--topic", "A", "--json").json_lines()]
    assert {r["queueId"]: r["consumerOffset"] for r in prog} == want
    assert all(r["lag"] == 0 for r in prog)
    table = json.loads((mq.root / "config" / "consumerOffset.json").read_text())["offsetTable"]
    assert {int(q): o for q, o in table["A@copy"].items()} == want


def test_exec_lines_become_messages_with_batches(mq: MQ, src: list[str], tmp_path: Path) -> None:
    h = handler_script(tmp_path / "suffix.sh", """
        # one output per input line, a blank line (skipped), and the batch size
        while IFS= read -r line; do echo "$line/b$MQ_BATCH_SIZE"; echo; done
    """)
    mq.ok("consume", "A", "-g", "t", "--from", "first", "-e", "--exec", h, "--batch", "7", "--to", "B")
    got = [m["body"] for m in read_all(mq, "B")]
    assert sorted(b.split("/")[0] for b in got) == sorted(src)
    once_each(got, got)
    sizes = {int(b.split("/b")[1]) for b in got}
    assert max(sizes) > 1 and max(sizes) <= 7, sizes


def test_exec_json_outputs_carry_body_keys_tags_sharding_and_properties(mq: MQ, src: list[str],
                                                                        tmp_path: Path) -> None:
    h = handler_script(tmp_path / "env.py", """
        #!/usr/bin/env python3
        import json, sys
        for line in sys.stdin:
            m = json.loads(line)
            print(json.dumps({"body": m["body"].upper(), "keys": ["x", m["keys"][0]], "tags": "U",
                              "shardingKey": m["shardingKey"], "properties": {"src": str(m["queueOffset"])}}))
    """)
    mq.ok("consume", "A", "-g", "j", "--from", "first", "-e", "--json", "--batch", "10", "--exec", h,
          "--output", "json", "--to", "B")
    got = read_all(mq, "B")
    once_each([m["body"] for m in got], [b.upper() for b in src])
    m = next(m for m in got if m["body"] == src[3].upper())
    assert (m["keys"], m["tags"], m["shardingKey"]) == (["x", "id3"], "U", "k3")
    assert m["properties"]["src"].isdigit()
    assert per_key(got) == {k: [b.upper() for b in src if b.startswith(k.lower() + "-")]
                            for k in per_key(got)}


def test_a_bad_json_line_fails_the_batch_emits_nothing_and_is_retried(mq: MQ, tmp_path: Path) -> None:
    mq.ok("topic", "create", "A", "--queues", "1")
    mq.ok("send", "A", input="a\nb\nc\n")
    # first run of each batch: a good line, then one that is not JSON; the retry is clean
    h = handler_script(tmp_path / "bad.sh", """
        body=$(cat)
        printf '{"body":"%s-try%s"}\\n' "$body" "$MQ_RECONSUME_TIMES"
        [ "$MQ_RECONSUME_TIMES" -gt 0 ] || echo 'not json'
        exit 0
    """)
    stage = mq.start("consume", "A", "-g", "j", "--from", "first", "--exec", h, "--output", "json",
                     "--to", "B", "--retry-delay", "0")
    wait_for(lambda: committed(mq, "j", "A") == 3 and len(read_all(mq, "B")) >= 3, 60,
             what="the retried batches")
    stage.stop()
    assert "handler output line 2" in stage.stderr(), stage.stderr()
    assert sorted(m["body"] for m in read_all(mq, "B")) == ["a-try1", "b-try1", "c-try1"]


def test_a_failing_handler_emits_nothing_and_goes_to_the_dlq(mq: MQ, tmp_path: Path) -> None:
    mq.ok("topic", "create", "A", "--queues", "2")
    mq.ok("send", "A", input="ok1\nbad\nok2\n")
    h = handler_script(tmp_path / "fail.sh", """
        body=$(cat)
        echo "out-$body-$MQ_RECONSUME_TIMES"
        [ "$body" != bad ]
    """)
    stage = mq.start("consume", "A", "-g", "f", "--from", "first", "--exec", h, "--to", "B",
                     "--retry-delay", "0", "--max-reconsume", "2")
    wait_for(lambda: mq.run("consume", "%DLQ%f", "-g", "dlq", "--from", "first", "-e").out.strip() == "bad",
             60, what="the failed message in the DLQ")
    wait_for(lambda: committed(mq, "f", "A") == 3, 30, what="the inputs committed")
    stage.stop()
    assert sorted(m["body"] for m in read_all(mq, "B")) == ["out-ok1-0", "out-ok2-0"]


def test_orderly_stage_keeps_each_queues_order(mq: MQ, src: list[str], tmp_path: Path) -> None:
    # outputs without a sharding key stay in their input's queue number (DST has as many)
    h = handler_script(tmp_path / "tag.sh", 'sed "s/$/-o/"')
    mq.ok("consume", "A", "-g", "o", "--from", "first", "-e", "--orderly", "--threads", "4",
          "--exec", h, "--to", "B")
    a = per_queue(read_all(mq, "A"))
    b = per_queue(read_all(mq, "B"))
    assert b == {q: [x + "-o" for x in bodies] for q, bodies in a.items()}


def test_concurrent_handlers_still_write_in_queue_order(mq: MQ, src: list[str], tmp_path: Path) -> None:
    h = handler_script(tmp_path / "tag.sh", 'sed "s/$/-c/"')
    mq.ok("consume", "A", "-g", "c", "--from", "first", "-e", "--threads", "8", "--exec", h, "--to", "B")
    got = read_all(mq, "B")
    once_each([m["body"] for m in got], [b + "-c" for b in src])
    # each output lands on the queue of DST its line says nothing about: its order among the
    # outputs of one input queue is the inputs' order
    a = per_queue(read_all(mq, "A"))
    order = {b + "-c": (q, i) for q, bodies in a.items() for i, b in enumerate(bodies)}
    for q, bodies in per_queue(got).items():
        seen: dict[int, int] = {}
        for b in bodies:
            src_q, i = order[b]
            assert i > seen.get(src_q, -1), f"DST queue {q}: {b} came after a later input of queue {src_q}"
            seen[src_q] = i


@pytest.mark.parametrize("extra,msg", [
    (["--to", "B", "--broadcast"], "--to needs a clustering group"),
    (["--to", "B", "--dedup"], "--dedup is not used with --to"),
    (["--to", "A"], "--to must name another topic"),
    (["--output", "json"], "--output applies to --to"),
    (["--flush", "sync"], "--flush applies to --to"),
    (["--to", "B", "--output", "json"], "--output is how an --exec handler"),
    (["--to", "B", "--json"], "--to copies messages to DST"),
])
def test_usage_errors(mq: MQ, extra: list[str], msg: str) -> None:
    mq.ok("topic", "create", "A", "--queues", "1")
    one_error(mq.run("consume", "A", "-g", "g", "-e", *extra), 2, msg)


def test_no_group_with_to_is_a_usage_error(mq: MQ) -> None:
    mq.ok("topic", "create", "A", "--queues", "1")
    one_error(mq.run("consume", "A", "--no-group", "-e", "--to", "B"), 2, "--to commits")


@pytest.mark.slow
def test_kill_9_mid_stream_then_restart_leaves_each_output_once(mq: MQ, tmp_path: Path) -> None:
    mq.ok("topic", "create", "A", "--queues", "4")
    mq.ok("topic", "create", "B", "--queues", "4")
    src = send_keyed(mq, "A", 1000)
    h = handler_script(tmp_path / "slow.sh", 'sleep 0.1; sed "s/$/-s/"')
    for _kill in range(3):
        stage = mq.start("consume", "A", "-g", "k", "--from", "first", "--batch", "5", "--exec", h,
                         "--to", "B")
        # killed once it has committed some outputs, with handlers running
        target = committed(mq, "k", "A") + 20
        wait_for(lambda t=target: committed(mq, "k", "A") > t, 60, what="some outputs committed")
        stage.kill9()
    mq.ok("consume", "A", "-g", "k", "--from", "first", "-e", "--batch", "5", "--exec", h, "--to", "B",
          timeout=120)
    got = read_all(mq, "B")
    once_each([m["body"] for m in got], [b + "-s" for b in src])
    mq.check_clean()


# -- found in review ---------------------------------------------------------------------------

@pytest.mark.slow
def test_resetting_one_queue_under_a_running_stage_duplicates_nothing_else(mq: MQ, tmp_path: Path) -> None:
    # A reset used to ignore every commit not yet in the offsets file (async: up to 30 s of
    # them), for every queue of the topic: their outputs were made again after the restart.
    mq.ok("topic", "create", "A", "--queues", "4")
    bodies = [f"m{i:05d}" for i in range(2000)]
    mq.ok("send", "A", input="\n".join(bodies) + "\n")
    slow = handler_script(tmp_path / "slow.sh", "sleep 0.01; cat")
    stage = mq.start("consume", "A", "-g", "g", "--from", "first", "--exec", slow, "--threads", "2", "--to", "B")
    wait_for(lambda: committed(mq, "g", "A") >= 200, timeout=120)
    mq.ok("offsets", "reset", "-g", "g", "--topic", "A", "-q", "3", "--to-latest", "--execute", "--force")
    assert stage.stop(60) == 0
    mq.ok("consume", "A", "-g", "g", "--exec", slow, "--threads", "4", "-e", "--to", "B")
    got = [m["body"] for m in read_all(mq, "B")]
    dups = [b for b, n in Counter(got).items() if n > 1]
    assert not dups, f"{len(dups)} outputs more than once, e.g. {dups[:5]}"
    q3 = {m["body"] for m in read_all(mq, "A") if m["queueId"] == 3}
    assert set(bodies) - q3 <= set(got)   # every message of the other queues, once


def _waits_for_flock(pid: int, path: Path) -> bool:
    """Whether process ``pid`` is blocked on a ``flock`` of ``path`` (a waiter's line, ``->``,
    in the kernel's lock table)."""
    st = path.stat()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if len(parts) > 6 and parts[1] == "->" and parts[2] == "FLOCK" and parts[5] == str(pid) \
                and parts[6] == dev:
            return True
    return False


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux /proc/locks")
@pytest.mark.slow
def test_a_batch_handed_out_before_a_reset_does_not_settle_its_message_in_the_queue_taken_again(
        mq: MQ, tmp_path: Path) -> None:
    """A reset lets every queue of its topic go, and the stage takes them again from their
    stored offsets at once, while the handlers of the batches handed out before it still run.
    Such a batch, collected after its message was handed out again, used to be applied to the
    new holding of its queue: it took the new run's place (its outputs, which the new hand-out
    had cleared, written as none) and moved the offset past the message, whose new run's
    outputs were then never written. One message of a queue nobody reset went missing."""
    from store.log.messagestore import Store
    gates = tmp_path / "gates"
    gates.mkdir()
    mq.ok("topic", "create", "A", "--queues", "2")
    mq.ok("topic", "create", "B", "--queues", "1")
    mq.ok("send", "A", "-q", "0", "t")
    mq.ok("send", "A", "-q", "1", input="a\nb\n")
    # t's two runs and a's wait at a gate (NAME.go), each saying it started (NAME) and that it
    # went through (NAME.passed); b only says it started. Two handler slots: t and a run, b waits
    # for one (and, its queue let go by the reset meanwhile, is handed back instead of started).
    h = handler_script(tmp_path / "gated.sh", f"""
        b=$(cat); d={gates}
        gate() {{ touch "$d/$1"; while [ ! -e "$d/$1.go" ]; do sleep 0.01; done; touch "$d/$1.passed"; }}
        case "$b" in
          t) if [ -e "$d/t.1" ]; then gate t.2; else gate t.1; fi ;;
          a) gate a ;;
          *) touch "$d/$b" ;;
        esac
        printf '%s\\n' "$b"
    """)
    stage = mq.start("consume", "A", "-g", "g", "--from", "first", "--exec", h, "--threads", "2", "--to", "B")
    wait_for(lambda: (gates / "t.1").exists() and (gates / "a").exists(), timeout=60, what="t and a in handlers")
    assert not (gates / "b").exists()
    with Store.open(mq.root) as s, s.write_lock():
        # queue 1 reset under the stage, the write lock kept: the stage lets both queues go, and
        # taking them again waits for the lock (a stage reads its starts once it was free)
        store.Admin.of(s).reset_offsets("g", "A", "latest", execute=True, queue=1, force=True)
        wait_for(lambda: _waits_for_flock(stage.pid, mq.root), timeout=60, what="the stage to take A/0 again")
        assert "offsets of A/0 were reset" in stage.stderr()
        (gates / "t.1.go").touch()
        wait_for(lambda: (gates / "t.1.passed").exists(), timeout=60, what="t's first run to end")
    # A/0 is taken again from offset 0: t is handed out again (its first run's outputs cleared),
    # then the first run's batch is collected
    wait_for(lambda: (gates / "t.2").exists(), timeout=60, what="t's second run")
    (gates / "t.2.go").touch()
    (gates / "a.go").touch()
    wait_for(lambda: committed(mq, "g", "A") == 3, timeout=60, what="A/0 committed")
    assert stage.stop(60) == 0
    mq.ok("consume", "A", "-g", "g", "--exec", h, "-e", "--to", "B")
    assert [m["body"] for m in read_all(mq, "B") if m["body"] == "t"] == ["t"], stage.stderr()


@pytest.mark.parametrize("output", ['{"body":"x","properties":{"p":"' + "a" * 40000 + '"}}',
                                    '{"body":"x","keys":5}', '{"body":"x","tags":"a\\u0001b"}'])
def test_an_output_a_write_would_refuse_fails_its_message_only(mq: MQ, tmp_path: Path, output: str) -> None:
    # Refused at the stage's write, it used to fail every queue's batch for ever (and exit 0)
    mq.ok("topic", "create", "A", "--queues", "1")
    mq.ok("send", "A", input="1\n2\n3\n")
    h = handler_script(tmp_path / "h.sh", f"""
        b=$(cat)
        if [ "$b" = 2 ]; then printf '%s\\n' '{output}'; else printf '{{"body":"out-%s"}}\\n' "$b"; fi""")
    res = mq.run("consume", "A", "-g", "g", "--from", "first", "-e", "--exec", h, "--output", "json",
                 "--max-reconsume", "0", "--to", "B")
    assert res.returncode in (0, 1), str(res)
    assert sorted(m["body"] for m in read_all(mq, "B")) == ["out-1", "out-3"]
    assert [m["body"] for m in read_all(mq, "%DLQ%g")] == ["2"]
    assert committed(mq, "g", "A") == 3


def test_an_iterator_attempt_that_was_not_committed_leaves_no_output(mq: MQ) -> None:
    mq.ok("topic", "create", "A", "--queues", "1")
    mq.ok("send", "A", input="a\nb\nc\n")
    code = f"""
import store
with store.Consumer("A", group="g", start_from="first", path={str(mq.root)!r}) as c:
    for msg in c.messages(exit_at_end=True, to="B"):
        c.commit_with(b"STALE-" + msg.body)
        break
    for msg in c.messages(exit_at_end=True, to="B"):
        if msg.body != b"a":
            c.commit_with(b"out-" + msg.body)
"""
    finish(python(code, stderr=subprocess.PIPE))
    assert sorted(m["body"] for m in read_all(mq, "B")) == ["out-b", "out-c"]   # (round robin: any queues)


def test_a_plain_member_after_a_killed_stage_is_not_moved_back_by_the_stage_s_commits(mq: MQ) -> None:
    """A stage killed (its last batches, commit records included, in the log but not yet in the
    offset table), then the group consumed to the end by a plain member: its offsets must be
    the group's. The stage's records used to be applied over them by every read (set as given,
    after the table), so `offsets show` went back and every later consume delivered the same
    messages again."""
    mq.ok("topic", "create", "A", "--queues", "2")
    mq.send_lines("A", [f"m{i:04d}" for i in range(4000)])
    stage = mq.run("consume", "A", "-g", "G", "--from", "first", "--to", "B", failpoints="put-after-index:3")
    assert stage.returncode in (-9, 137), stage
    rest = mq.ok("consume", "A", "-g", "G", "-e").out.split()
    assert rest, "the stage had consumed everything before its third batch"
    shown = {r["queueId"]: r["offset"] for r in mq.ok("offsets", "show", "-g", "G", "--json").json_lines()}
    assert shown == {0: 2000, 1: 2000}
    assert mq.ok("consume", "A", "-g", "G", "-e").out.split() == []
    done = {m["body"] for m in read_all(mq, "B")} | set(rest)
    assert done >= {f"m{i:04d}" for i in range(4000)}   # nothing skipped between the two


def _kill_a_stage_after_its_batch(mq: MQ) -> None:
    """A small-segment store where a stage SRC -> DST of group G was killed right after its
    one batch of 20 outputs (its offsets only a commit record in the log), and more segments
    after it, so that the one holding the commit record is not the last."""
    mq.ok("init", "--max-message-size", "4096", "--segment-size", "73728")
    mq.ok("topic", "create", "SRC", "--queues", "1")
    mq.send_lines("SRC", [f"m{i:02d}" for i in range(20)])
    stage = mq.run("consume", "SRC", "-g", "G", "--from", "first", "--to", "DST",
                   failpoints="put-after-index:2")   # (the first write is a commit record alone)
    assert stage.returncode in (-9, 137), stage
    mq.send_lines("FILL", [f"f{i:04d}-" + "p" * 1000 for i in range(200)])


def test_store_clean_keeps_the_offsets_a_killed_stage_committed(tmp_path: Path) -> None:
    """A stage killed right after a batch: its offsets are only a commit record in the log
    (the offsets file absorbs those once a second, or at exit). `store clean` then deleted the
    segment holding that record, and the group's offsets went back to 0; a restarted stage
    warned that offset 0 is no longer stored. Clean must take such records into the offsets
    file first."""
    mq = MQ(tmp_path / "small", tmp_path)
    try:
        _kill_a_stage_after_its_batch(mq)
        assert committed(mq, "G", "SRC") == 20   # (one batch: from its commit record alone)
        plan = json.loads(mq.ok("store", "clean", "--older-than", "0s", "--json").out.splitlines()[-1])
        assert plan["commitlogSegments"] > 0 and plan["oldMinOffset"] < plan["minOffset"]
        assert committed(mq, "G", "SRC") == 20
        assert mq.offsets("G", "SRC") == {("SRC", 0): 20}   # in the offsets file itself
        mq.send_lines("SRC", ["late0", "late1"])
        again = mq.ok("consume", "SRC", "-g", "G", "-e", "--to", "DST")
        assert "no longer stored" not in again.stderr and "warning" not in again.stderr, again
        assert sorted(m["body"] for m in read_all(mq, "DST")) == ["late0", "late1"]
        assert committed(mq, "G", "SRC") == 22
    finally:
        mq.cleanup()


def test_a_reader_that_read_the_offsets_file_before_a_clean_reads_it_again(tmp_path: Path, monkeypatch) -> None:
    """A reader that loaded the offsets file just before `store clean` absorbed a killed
    stage's commit records into it, and looks for those records just after their segment was
    deleted, finds them gone: it must read the file again (which has them now), not take the
    old offsets (a stage started then would make its outputs again)."""
    from store.layout import Layout
    from store.log import offsettable
    from store.log.offsets import ClusterOffsetStore
    mq = MQ(tmp_path / "small", tmp_path)
    try:
        _kill_a_stage_after_its_batch(mq)
        layout = Layout(mq.root)
        before = offsettable.load(layout)   # the file as read before the clean: no offset yet
        assert before.table.get("SRC", "G", 0) < 20
        plan = json.loads(mq.ok("store", "clean", "--older-than", "0s", "--json").out.splitlines()[-1])
        assert plan["commitlogSegments"] > 0
        real, calls = offsettable.load, []

        def load(layout_: Layout, deep: bool = False) -> offsettable.Loaded:
            calls.append(deep)
            return before if len(calls) == 1 else real(layout_, deep)

        monkeypatch.setattr(offsettable, "load", load)
        assert ClusterOffsetStore(layout).read("G", "SRC", 0) == 20
        assert len(calls) == 2
    finally:
        mq.cleanup()


def test_an_output_without_a_key_for_an_ordered_topic_fails_its_message_only(mq: MQ, tmp_path: Path) -> None:
    """One handler output without a sharding key, for an ordered output topic, was refused by
    the stage's write: the stage exited 2 without naming the input, the batch's good outputs
    went with it, and every restart failed the same way (the lag never moved). It fails its
    own message now, as any output the write would refuse (retried, then dead-lettered)."""
    mq.ok("topic", "create", "A", "--queues", "1")
    mq.ok("topic", "create", "O", "--queues", "2", "--order")
    mq.send_lines("A", [f"m-{i}" for i in range(1, 7)])
    h = handler_script(tmp_path / "h.sh", """
        b=$(cat)
        if [ "$b" = m-4 ]; then printf '{"body":"%s"}\\n' "$b"; else printf '{"body":"%s","shardingKey":"k"}\\n' "$b"; fi""")
    res = mq.run("consume", "A", "-g", "g", "--from", "first", "-e", "--exec", h, "--output", "json",
                 "--max-reconsume", "0", "--to", "O")
    assert res.returncode == 1 and "gave up on 1 message" in res.stderr, str(res)
    assert "is ordered" in res.stderr, str(res)   # (the handler's failure says why)
    assert sorted(m["body"] for m in read_all(mq, "O")) == ["m-1", "m-2", "m-3", "m-5", "m-6"]
    assert [m["body"] for m in read_all(mq, "%DLQ%g")] == ["m-4"]
    assert committed(mq, "g", "A") == 6
    # and from Python: a run whose handler gives such an output goes on with the others
    with store.Consumer("A", "py", str(mq.root), start_from="first") as c:
        c.run(lambda m: [m.body] if m.text == "m-2" else [{"body": m.body, "sharding_key": "k"}],
              to="O", exit_at_end=True, max_reconsume=0)
    assert sorted(m["body"] for m in read_all(mq, "O")).count("m-1") == 2
    assert [m["body"] for m in read_all(mq, "%DLQ%py")] == ["m-2"]
