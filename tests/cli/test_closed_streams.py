"""``mqctl`` started with a standard stream closed (``>&-``, ``2>&-``), as a script or a
daemon's supervisor may start it: a command that needs no standard output still succeeds, one
whose data cannot be written says so in one line with exit 1 (a consumer then commits nothing),
and a closed standard error costs only the diagnostics, never the exit code. Real processes
through a shell, which is what closes the descriptors."""
from __future__ import annotations

from tests.procs import MQ, one_error


def test_a_closed_standard_output_fails_only_the_commands_that_write_data(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    # The summary of a send goes to stderr: the send is done and says so with exit 0.
    res = mq.shell("mqctl send T one >&-")
    assert res.returncode == 0 and "sent 1 message" in res.stderr, res
    for command in ("consume T -g G --from first -c 1", "consume T -g G --from first -c 1 --json",
                    "send T two --json", "topic list", "--version"):
        one_error(mq.shell(f"mqctl {command} >&-"), 1, "cannot write to standard output")
    # Nothing was written, so nothing was consumed: the group reads both messages afterwards.
    assert mq.offsets("G") == {("T", 0): 0}
    res = mq.ok("consume", "T", "-g", "G", "--from", "first", "-e")
    assert res.stdout == b"one\ntwo\n", res


def test_a_closed_standard_error_keeps_every_exit_code(mq: MQ) -> None:
    mq.ok("topic", "create", "T", "--queues", "1")
    for command, code in (("send T one", 0), ("send T", 0), ("send 'bad name' x", 2),
                          ("topic status missing", 3), ("topic create T --queues 2", 4)):
        res = mq.shell(f"printf 'two\\n' | mqctl {command} 2>&-")
        assert res.returncode == code and res.stderr == "", (command, res)
    assert mq.ok("consume", "T", "--no-group", "--from", "first", "-e").stdout == b"one\ntwo\n"
