"""Running the commands of ``mqctl tx``: ``tx send --exec`` (the local transaction) and
``tx check --check-cmd`` (the check service's question).

A command is split like a shell command line (``mqctl.shellwords``) and run without a shell, in a process
group of its own. Its own process's exit is what counts: its exit status, and (``--check-cmd``)
what it wrote to stdout until then, read for at most ``EXIT_GRACE_S`` more, not until EOF (a
child it left in the background may hold its stdout for ever). The group does not outlive the
run: whatever the command left running in it is killed once it exited, when it overruns its
timeout, or when mqctl is interrupted. It gets the message body on stdin and, in its
environment::

    MQ_TX_ID, MQ_MSG_ID    the transaction id (= the message id consumers will see)
    MQ_TOPIC, MQ_QUEUE_ID  the real topic and queue
    MQ_KEYS                business keys, space separated (as for consume --exec)
    MQ_TAGS                the tag
    MQ_BORN_TIMESTAMP      ms since the epoch
    MQ_CHECK_TIMES         check only: 1 for the first check of this transaction

``--exec``: exit 0 commits, exit 1 rolls back, anything else leaves the transaction UNKNOWN
for the check service.

``--check-cmd`` answers on the last non-empty line of its stdout and exits 0. The line is
read without its surrounding blanks and in any case: ``COMMIT`` or ``ROLLBACK`` resolve the
transaction, ``UNKNOWN`` leaves it for a later pass; RocketMQ's ``COMMIT_MESSAGE``,
``ROLLBACK_MESSAGE`` and ``UNKNOW`` mean the same. Lines before the last are free (logging).
Anything else — another word, no output, a non-zero exit, a crash, overrunning
``--cmd-timeout`` — leaves the transaction UNKNOWN too, with a warning that says why.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Callable

from mqctl.errors import warn

if TYPE_CHECKING:
    from store import Admin, TransactionCheckEvent, TransactionCheckReport
    from store import StoredMessage as Message

ANSWERS = {"COMMIT": "COMMIT", "COMMIT_MESSAGE": "COMMIT",
           "ROLLBACK": "ROLLBACK", "ROLLBACK_MESSAGE": "ROLLBACK",
           "UNKNOWN": "UNKNOWN", "UNKNOW": "UNKNOWN"}
VALID = "expected COMMIT, ROLLBACK or UNKNOWN"
EXIT_GRACE_S = 0.2   # after the command exited: how long output on its way is still read


def command_argv(command: str, flag: str) -> list[str]:
    """``command`` split like a shell line; its program must be runnable (exit 1 otherwise, as
    ``consume --exec``), so that a typo is refused before any half message is stored or any
    check is counted."""
    from mqctl.consumer.handlers import check_runnable
    from mqctl.shellwords import split
    from store.errors import UsageError
    try:
        argv = split(command)
    except ValueError as exc:
        raise UsageError(f"{flag} {command!r}: {exc}") from exc
    if not argv:
        raise UsageError(f"{flag} needs a command")
    check_runnable(argv, "check command" if flag == "--check-cmd" else "local transaction")
    return argv


def message_env(m: Message, check_times: int | None) -> dict[str, str]:
    """The environment of a command asked about ``m`` (table in the module doc)."""
    from store import Prop
    env = dict(os.environ)
    env.update(MQ_TX_ID=m.uniq_key or "", MQ_MSG_ID=m.uniq_key or "",
               MQ_TOPIC=m.properties.get(Prop.REAL_TOPIC, ""),
               MQ_QUEUE_ID=m.properties.get(Prop.REAL_QID, ""), MQ_KEYS=" ".join(m.keys),
               MQ_TAGS=m.tags or "", MQ_BORN_TIMESTAMP=str(m.born_timestamp))
    if check_times is not None:
        env["MQ_CHECK_TIMES"] = str(check_times)
    return env


class Runner:
    """Runs one command at a time, in a process group of its own; :meth:`stop` (safe in a
    signal handler) kills it.

    A signal that ends mqctl must end that group too, whatever step the run is at: one that
    comes while ``Popen`` starts the command is held until the command is known; one that comes
    after the command's own process ended (its children may still hold its stdout, or run)
    still kills its group; and once the clean-up began, another is only recorded, so that it
    cannot cut the clean-up short."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self._exit: BaseException | None = None   # what a one-shot run's signal ends mqctl with
        self._may_raise = False                  # ... at once (not while starting or cleaning up)

    def run(self, argv: list[str], body: bytes, env: dict[str, str], timeout_s: float | None,
            capture: bool = True) -> tuple[int | None, bytes]:
        """(exit status, stdout); status None when it could not start, ran out of time (both
        already warned about) or was stopped. Without ``capture`` the command's stdout goes to
        our stderr (ours carries only data)."""
        restore = self._exit_on_signals()
        try:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env, start_new_session=True,
                                        stdout=subprocess.PIPE if capture else sys.stderr.fileno())
            except OSError as exc:
                warn(f"cannot run {argv[0]}: {exc.strerror or exc}")
                return None, b""
            self.proc = proc
            exited, out = False, b""
            try:
                if self.stopping:   # (a signal while it started)
                    return None, b""
                self._may_raise = True
                exited, out, held = exchange(proc, body, timeout_s)
                self._may_raise = False
                if self.stopping:   # (killed by :meth:`stop`: no answer, and nothing to warn about)
                    return None, b""
                if not exited:
                    warn(f"{argv[0]} did not finish within {timeout_s:g}s; killed")
                    return None, b""
                if held:
                    warn(f"{argv[0]} exited but left a process holding its stdout; killed it "
                         f"(the answer is what {argv[0]} wrote before it exited)")
            finally:
                self._may_raise = False
                self.proc = None
                # Whatever is left of its run goes (the module doc). Its own process is not
                # reaped yet, so the group's id cannot have been given to another meanwhile.
                kill_group(proc)
                proc.wait()
                for pipe in (proc.stdin, proc.stdout):
                    if pipe is not None:
                        pipe.close()
            return proc.returncode, out
        finally:
            restore()
            if self._exit is not None:
                raise self._exit

    def stop(self) -> None:
        self.stopping = True
        if self.proc is not None:
            kill_group(self.proc)

    def _exit_on_signals(self) -> Callable[[], None]:
        """While a command runs in a one-shot ``tx`` command (no handler of its own: ``tx check
        --loop`` has one), SIGTERM ends mqctl by ``Terminated`` (exit 143 and its
        ``mqctl: error: terminated`` line, as ``send``), SIGINT by ``KeyboardInterrupt`` (130,
        ``interrupted``), SIGHUP by ``SystemExit(129)`` (its terminal is gone: no line to print),
        rather than at once, so that the command's group is killed first: it runs in a session
        of its own and would outlive us. Returns what puts the handlers back."""
        import threading

        from mqctl.errors import Terminated
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL,
                    signal.SIGINT: signal.default_int_handler}
        taken = {sig: old for sig, old in defaults.items() if signal.getsignal(sig) is old}

        def on_signal(signum: int, _frame: object) -> None:
            self.stop()
            if self._exit is None:
                self._exit = (KeyboardInterrupt() if signum == signal.SIGINT else
                              Terminated() if signum == signal.SIGTERM else SystemExit(128 + signum))
            if self._may_raise:
                self._may_raise = False
                raise self._exit
        for sig in taken:
            signal.signal(sig, on_signal)

        def restore() -> None:
            for sig, old in taken.items():
                signal.signal(sig, old)
        return restore


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def exchange(proc: subprocess.Popen[bytes], body: bytes, timeout_s: float | None) -> tuple[bool, bytes, bool]:
    """Feed ``body`` to the command's stdin and read its stdout (when it is a pipe) until its
    own process exits, without reaping it. Returns (exited within ``timeout_s``, its stdout,
    whether that was still held open ``EXIT_GRACE_S`` after the exit: by a child it left).
    Stdin is closed once the body is written, or when the command exits or stops reading."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    stdin = proc.stdin
    assert stdin is not None
    win, rout = stdin.fileno(), proc.stdout.fileno() if proc.stdout is not None else -1
    poller = select.poll()
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):   # (no pidfd: the exit is looked for every 50 ms)
        pidfd = -1
    if pidfd >= 0:
        poller.register(pidfd, select.POLLIN)
    if rout >= 0:
        os.set_blocking(rout, False)
        poller.register(rout, select.POLLIN)
    data, pos = memoryview(body), 0
    chunks: list[bytes] = []
    if body:
        os.set_blocking(win, False)
        poller.register(win, select.POLLOUT)
    else:
        stdin.close()
        win = -1

    def close_stdin() -> None:
        nonlocal win
        if win >= 0:
            poller.unregister(win)
            stdin.close()
            win = -1

    exited_at: float | None = None
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and pidfd < 0 and _exited(proc.pid):
                exited_at = now
            if exited_at is not None:
                close_stdin()
                if rout < 0:
                    return True, b"".join(chunks), False
                left: float | None = exited_at + EXIT_GRACE_S - now
            else:
                left = None if deadline is None else deadline - now
            if left is not None and left <= 0:
                return exited_at is not None, b"".join(chunks), exited_at is not None
            if pidfd < 0:
                left = 0.05 if left is None else min(left, 0.05)
            for fd, _ev in poller.poll(None if left is None else max(1, int(left * 1000 + 0.999))):
                if fd == pidfd:
                    exited_at = time.monotonic()
                    poller.unregister(pidfd)
                elif fd == win:
                    try:
                        pos += os.write(win, data[pos:pos + 65536])
                    except BlockingIOError:
                        pass
                    except OSError:   # (it stopped reading: EPIPE)
                        pos = len(data)
                    if pos >= len(data):
                        close_stdin()
                elif fd == rout:
                    try:
                        got = os.read(rout, 65536)
                    except BlockingIOError:
                        continue
                    if got:
                        chunks.append(got)
                    else:   # EOF
                        poller.unregister(rout)
                        rout = -1
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _exited(pid: int) -> bool:
    """Whether the unreaped child ``pid`` has exited (it stays unreaped)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def read_answer(stdout: bytes) -> tuple[str | None, str]:
    """(COMMIT, ROLLBACK, UNKNOWN or None, the line it was read from): the last non-empty line
    of ``stdout``, any case, surrounding blanks ignored; None when that is no answer."""
    lines = [ln.strip() for ln in stdout.decode("utf-8", "replace").splitlines() if ln.strip()]
    said = lines[-1] if lines else ""
    return ANSWERS.get(said.upper()), said


def check_answer(status: int | None, stdout: bytes, tx_id: str) -> str:
    """The verdict of a check command that exited with ``status`` (None: it could not run or
    was killed, already warned about): COMMIT, ROLLBACK or UNKNOWN. A command that did not
    answer properly is UNKNOWN, with a warning line naming what it did and the valid answers."""
    if status is None:
        return "UNKNOWN"
    if status != 0:
        how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
        warn(f"check command {how} for {tx_id}; left unknown")
        return "UNKNOWN"
    answer, said = read_answer(stdout)
    if answer is None:
        shown = repr(said if len(said) <= 60 else said[:57] + "...") if said else "nothing"
        warn(f"check command answered {shown} for {tx_id}; {VALID}; left unknown")
        return "UNKNOWN"
    return answer


def local_transaction(admin: Admin, half: Message, argv: list[str], sync: bool) -> str:
    """Run ``tx send --exec``'s command on ``half``; commit on exit 0, roll back on exit 1.
    Returns the transaction's state (UNKNOWN for any other exit).

    SIGINT ends it as Ctrl-C does (exit 130, the half message left to the check service), also
    when mqctl was started with SIGINT ignored (``&`` in a script), as ``send`` does: a one-shot
    command, unlike ``tx check --loop``, has nothing to outlive a terminal for."""
    import threading
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    status, _ = Runner().run(argv, half.body, message_env(half, None), None, capture=False)
    if status not in (0, 1):
        return "UNKNOWN"
    return admin.end_transaction(half.uniq_key or "", commit=status == 0, sync=sync).state


def check_service(admin: Admin, argv: list[str], *, timeout_ms: int, max_checks: int,
                  cmd_timeout_s: float | None, loop_pause_s: float | None,
                  on_event: Callable[[TransactionCheckEvent], None],
                  on_pass: Callable[[TransactionCheckReport], None]) -> None:
    """Check passes asking ``argv``: one, or with ``loop_pause_s`` one every so many seconds
    until SIGINT, SIGTERM or SIGHUP (which kill a running command and end the loop quietly).
    SIGINT and SIGTERM end it also when mqctl started with them ignored (``&`` in a script
    starts a job with SIGINT ignored), as they end ``consume``; an ignored SIGHUP stays
    ignored: ``nohup mqctl tx check --loop`` must outlive its terminal's hang-up."""
    runner = Runner()
    if loop_pause_s is not None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if sig != signal.SIGHUP or signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, lambda *_: runner.stop())

    def ask(copy: Message, times: int) -> str:
        status, said = runner.run(argv, copy.body, message_env(copy, times), cmd_timeout_s)
        return check_answer(status, said, copy.uniq_key or "")

    while True:
        report = admin.check_transactions(ask, timeout_ms=timeout_ms, max_checks=max_checks,
                            on_event=on_event, should_stop=lambda: runner.stopping)
        if report.events or loop_pause_s is None:
            on_pass(report)
        if loop_pause_s is None or runner.stopping:
            return
        deadline = time.monotonic() + loop_pause_s
        while not runner.stopping and time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        if runner.stopping:
            return
