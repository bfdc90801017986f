"""How ``consume --exec`` starts a handler (``posix_spawnp``, mqctl/consumer/handlers.py): what it
inherits, what its stdin holds, how the command is found."""
from __future__ import annotations

import os
import shlex

import pytest

from tests.procs import MQ, handler_script  # noqa: F401  (mq is a fixture)


def test_a_handler_inherits_no_descriptor_the_consumer_was_given(mq: MQ) -> None:
    """A descriptor the consumer inherited without close-on-exec (a shell's ``7<file``) does
    not reach its handlers, as with ``close_fds``."""
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", ["a", "b"])
    stray = mq.work / "stray-marker"
    stray.write_text("x")
    seen = mq.work / "seen"
    h = handler_script(mq.work / "h.sh", f"""
        for f in /proc/$$/fd/*; do readlink "$f"; done >> {shlex.quote(str(seen))}
        cat > /dev/null""")
    # The check can fail: the same shell line hands fd 7 to a child that is not a consumer.
    control = mq.shell(f"exec 7<{shlex.quote(str(stray))}; readlink /proc/self/fd/7")
    assert control.stdout.decode().strip() == str(stray), control
    res = mq.shell(f"exec 7<{shlex.quote(str(stray))}; mqctl consume T -g G --from first -e --exec {h}")
    assert res.returncode == 0, res
    links = seen.read_text().splitlines()
    assert links and str(stray) not in links


def test_stdin_is_a_regular_file_holding_the_whole_body(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    big = os.urandom(3 << 20)
    mq.store().put_bodies("T", [b"", big])
    out = mq.work / "out"
    out.mkdir()
    h = handler_script(mq.work / "h.sh", f"""
        [ -f /dev/stdin ] || exit 3
        cat > {shlex.quote(str(out))}/"$MQ_QUEUE_OFFSET" """)
    mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--exec", h, timeout=60)
    assert (out / "0").read_bytes() == b""
    assert (out / "1").read_bytes() == big
    assert mq.committed_total("G", "T") == 2


def test_a_command_without_a_slash_is_looked_up_on_path(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", ["hello"])
    bindir = mq.work / "bin"
    bindir.mkdir()
    got = mq.work / "got"
    handler_script(bindir / "my-handler", f'printf "%s|" "$1" > {shlex.quote(str(got))}; cat >> {shlex.quote(str(got))}')
    path = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    mq.ok("consume", "T", "-g", "G", "--from", "first", "-e", "--exec", "my-handler arg1",
          extra_env={"PATH": path})
    assert got.read_text() == "arg1|hello"


def test_a_handlers_wait_times_out_reaps_and_takes_a_timeout_of_weeks() -> None:
    from mqctl.consumer.child import Child, HandlerTimeout
    env = dict(os.environ)
    slow = Child(os.posix_spawnp("sleep", ["sleep", "600"], env), 0)
    with pytest.raises(HandlerTimeout):
        slow.wait(0.05)
    assert slow.returncode is None   # still running: the time ran out, not the child
    slow.kill()
    assert slow.wait() == -9
    short = Child(os.posix_spawnp("sleep", ["sleep", "0.2"], env), 0)
    assert short.wait(60 * 86400.0) == 0   # more ms than poll's C int holds
    killed = Child(os.posix_spawnp("sh", ["sh", "-c", "kill -9 $$"], env), 0)
    assert killed.wait(10) == -9
    failed = Child(os.posix_spawnp("sh", ["sh", "-c", "exit 3"], env), 0)
    assert failed.wait() == 3 and failed.wait() == 3   # reaped once, remembered


def test_an_orderly_handler_holds_its_queues_lock_and_gets_its_body_with_stdin_closed(mq: MQ) -> None:
    """The handler inherits a descriptor of its queue's lock file (so the lock outlives a
    killed consumer until the handler is gone), and its stdin is the body even when the
    consumer itself runs with descriptor 0 closed (its own files then take that number)."""
    mq.ok("topic", "create", "T", "--queues", "1")
    mq.send_lines("T", ["first", "second"])
    seen = mq.work / "seen"
    h = handler_script(mq.work / "h.sh", f"""
        for f in /proc/$$/fd/*; do readlink "$f"; done >> {shlex.quote(str(seen))}
        cat >> {shlex.quote(str(mq.work / "bodies"))}""")
    res = mq.shell(f"mqctl consume T -g G --orderly --from first -e --exec {h} <&-")
    assert res.returncode == 0, res
    links = seen.read_text().splitlines()
    lock = mq.root / "locks" / "G" / "T"
    assert sum(1 for link in links if link.startswith(str(lock))) == 2, links
    assert (mq.work / "bodies").read_bytes() == b"firstsecond"
