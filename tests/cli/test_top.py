"""``mqctl top`` as a person and a script use it: ``--once`` and ``--json`` on a store with a
producer and consumers running, checked against ``progress``, ``locks`` and ``consumers``;
a read-only store left byte for byte as it was; and the full screen driven in a real
terminal (tmux): views, filter, resize, ``q``, the terminal restored."""
from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.procs import MQ, MQCTL, handler_script, mqctl_env, one_error, wait_for


def _setup(mq: MQ) -> None:
    """Topic orders (4 queues); group idle consumed 20 of 60 and stopped; group live is an
    orderly consumer still running (it holds queue locks)."""
    mq.ok("topic", "create", "orders", "--queues", "4")
    mq.ok("send", "orders", input="".join(f"m{i}\n" for i in range(60)))
    mq.ok("consume", "orders", "-g", "idle", "--from", "first", "-c", "20", "-e")


def _start_live(mq: MQ):
    c = mq.start("consume", "orders", "-g", "live", "--orderly", "--from", "first", "--rebalance-interval", "0.2")
    def ready() -> bool:
        res = mq.run("locks", "-g", "live", "--json")   # exit 3 until the member has joined
        return (res.returncode == 0 and len(res.json_lines()) == 4
                and {lk["state"] for lk in res.json_lines()} == {"held"} and _lag(mq, "live") == 0)
    wait_for(ready, what="live to lock every queue and drain")
    return c


def _lag(mq: MQ, group: str) -> int:
    return sum(r["lag"] for r in mq.ok("progress", "-g", group, "--json").json_lines())


def test_once_json_agrees_with_the_other_commands(mq: MQ) -> None:
    _setup(mq)
    _start_live(mq)
    mq.ok("send", "orders", input="".join(f"n{i}\n" for i in range(7)))
    wait_for(lambda: _lag(mq, "live") == 0, what="live to consume the new messages")
    res = mq.ok("top", "--once", "--json")
    [obj] = res.json_lines()
    topics = {t["topic"]: t for t in obj["topics"]}
    assert topics["orders"]["messages"] == 67 and sum(topics["orders"]["maxOffsets"]) == 67
    assert topics["orders"]["bytes"] > 0 and topics["orders"]["bytesExact"] is True
    groups = {g["group"]: g for g in obj["groups"]}
    assert groups["idle"]["lag"] == _lag(mq, "idle") == 47
    assert groups["live"]["lag"] == 0
    progress = {(r["topic"], r["queueId"]): r for r in mq.ok("progress", "-g", "idle", "--json").json_lines()}
    for q in groups["idle"]["queues"]:
        p = progress[(q["topic"], q["queueId"])]
        assert (q["brokerOffset"], q["consumerOffset"], q["lag"]) == (p["brokerOffset"], p["consumerOffset"], p["lag"])
    [member] = mq.ok("consumers", "-g", "live", "--json").json_lines()
    [shown] = groups["live"]["members"]
    assert shown["clientId"] == member["clientId"] and shown["pid"] == member["pid"]
    assert sorted(q["queueId"] for q in shown["queues"]) == [0, 1, 2, 3]
    locks = {(lk["topic"], lk["queueId"]): lk for lk in mq.ok("locks", "--json").json_lines()}
    assert {(lk["topic"], lk["queueId"]) for lk in obj["locks"]} == set(locks)
    for lk in obj["locks"]:
        assert lk["state"] == "held" and lk["alive"] is True and lk["clientId"] == member["clientId"]
        assert 0 < lk["leaseLeftMs"] <= 60_000
    assert obj["problems"]["deadLetters"] == {} and obj["problems"]["warnings"] == []
    # the plain view's MODE tells an orderly member apart (the JSON keeps mode and orderly apart)
    assert shown["mode"] == "clustering" and shown["orderly"] is True
    rows = [line for line in mq.ok("top", "--once").out.splitlines() if member["clientId"] in line]
    assert any("clustering orderly" in row for row in rows), rows


def test_once_plain_shows_every_view(mq: MQ) -> None:
    _setup(mq)
    res = mq.ok("top", "--once")
    out = res.out
    for title in ("TOPICS", "GROUPS", "LOCKS", "PROBLEMS"):
        assert f"\n{title}\n" in f"\n{out}"
    idle = next(line.split() for line in out.splitlines() if line.startswith("idle "))
    assert idle[:3] == ["idle", "orders", "40"]
    assert "\x1b[" not in out
    # a pipe without --once is the same single snapshot
    assert mq.ok("top").out.splitlines()[:3] == out.splitlines()[:3]
    focused = mq.ok("top", "--once", "-g", "idle").out
    assert "QUEUES" in focused and "COMMITTED" in focused


def test_json_stream_one_object_per_refresh(mq: MQ) -> None:
    _setup(mq)
    p = mq.start("top", "--json", "--interval", "0.2")
    wait_for(lambda: len(p.lines()) >= 3, what="three refreshes")
    p.signal(2)
    assert p.wait() == 0
    objs = [__import__("json").loads(line) for line in p.lines()]
    assert all(o["groups"][0]["group"] == "idle" for o in objs)
    assert objs[0]["topics"][0]["inRate"] is None and objs[-1]["topics"][0]["inRate"] == 0.0


def test_a_store_removed_while_looked_at_ends_the_stream_with_exit_3(mq: MQ) -> None:
    """It printed empty snapshots (no topics) for as long as it ran, as if the store were empty
    (one look that overlaps the removal may still print what it saw, then it ends)."""
    _setup(mq)
    p = mq.start("top", "--json", "--interval", "0.2")
    wait_for(lambda: len(p.lines()) >= 1, what="a first refresh")
    import shutil
    shutil.rmtree(mq.root)
    assert p.wait() == 3
    assert __import__("json").loads(p.lines()[0])["topics"]
    assert "no store at" in p.stderr() and "it was removed" in p.stderr()


def test_missing_store_and_unknown_names(mq: MQ, tmp_path: Path) -> None:
    one_error(mq.run("--store", str(tmp_path / "nope"), "top", "--once"), 3, "no store at")
    _setup(mq)
    one_error(mq.run("top", "--once", "-g", "nosuch"), 3, "consumer group 'nosuch' does not exist")
    one_error(mq.run("top", "--once", "--topic", "nosuch"), 3, "topic 'nosuch' does not exist")


def test_stale_lock_and_dead_letters_are_problems(mq: MQ) -> None:
    _setup(mq)
    c = _start_live(mq)
    c.kill9()
    mq.ok("send", "orders", "-q", "0", "POISON")
    res = mq.run("consume", "orders", "-g", "workers", "--from", "first", "-e", "--max-reconsume", "0",
                 "--exec", 'sh -c "! grep -q POISON"')
    one_error(res, 1, "gave up on 1 message", allow_warnings=True)
    [obj] = mq.ok("top", "--once", "--json").json_lines()
    assert {lk["state"] for lk in obj["locks"]} == {"stale"}
    assert obj["problems"]["deadLetters"] == {"workers": 1}
    out = mq.ok("top", "--once").out
    assert "stale" in out and "dead letters  workers" in out
    # the header counts the problems view's rows: the dead letters and each stale lock
    cp = mq.ok("top", "--once")
    rows = [line for line in cp.out.split("PROBLEMS\n", 1)[1].splitlines()[1:] if line.strip()]
    stale = sum(1 for lk in obj["locks"] if lk["state"] == "stale")
    assert sum(line.startswith("lock ") for line in rows) == stale >= 1, cp.out
    assert len(rows) == 1 + stale and f"{len(rows)} problems" in cp.stderr, (cp.out, cp.stderr)


def test_a_transaction_younger_than_the_check_timeout_is_no_problem_yet(mq: MQ) -> None:
    """README: problems are "transactions older than the check timeout"; a just-sent half is
    not listed (``tx list`` shows it), and the header says so."""
    mq.ok("tx", "send", "txt", "hello")
    cp = mq.ok("top", "--once")
    assert cp.out.endswith("PROBLEMS\nno problems\n") and "0 problems" in cp.stderr, (cp.out, cp.stderr)


# -- read-only ------------------------------------------------------------------------------------

def _digest(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _mount(args: list[str]) -> str | None:
    try:
        r = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if r.returncode == 0 else (r.stderr.strip() or f"mount exited {r.returncode}")


def test_top_on_a_read_only_store_writes_nothing(mq: MQ, tmp_path: Path) -> None:
    _setup(mq)
    live = _start_live(mq)
    copy = tmp_path / "copy"
    shutil.copytree(mq.root, copy)
    live.stop()
    subprocess.run(["chmod", "-R", "a-w", str(copy)], check=True)
    view = tmp_path / "ro"
    view.mkdir()
    mounted = _mount(["--bind", str(copy), str(view)]) is None
    if mounted and _mount(["-o", "remount,bind,ro", str(view)]) is not None:
        subprocess.run(["umount", str(view)])
        mounted = False
    if not mounted and os.geteuid() == 0:
        pytest.skip("root ignores file modes and a read-only bind mount could not be made")
    target = view if mounted else copy
    try:
        before = _digest(target)
        ro = MQ(target, tmp_path)
        [obj] = ro.ok("top", "--once", "--json").json_lines()
        assert {g["group"]: g["lag"] for g in obj["groups"]} == {"idle": 40, "live": 0}
        assert {lk["state"] for lk in obj["locks"]} == {"stale"}   # the copy's holder is no process
        res = ro.ok("top", "--once")
        assert "orders" in res.out and res.stderr.count("warning") == 0, res.stderr
        assert _digest(target) == before
    finally:
        if mounted:
            subprocess.run(["umount", str(view)])
        subprocess.run(["chmod", "-R", "u+w", str(copy)])


# -- the full screen, in a real terminal ----------------------------------------------------------

TMUX = shutil.which("tmux")


class Tmux:
    """One tmux server of the test's own (its own socket), one window running a command."""

    def __init__(self, tmp_path: Path, command: str, env: dict[str, str], width: int, height: int) -> None:
        self.sock = str(tmp_path / "tmux.sock")
        script = tmp_path / "run.sh"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if k.isidentifier())
        script.write_text(f"{exports}{command}\necho EXIT=$?\nstty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\?icanon'\n"
                          "stty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\?echo'\necho SHOWN\nsleep 600\n")
        self.tmux("new-session", "-d", "-x", str(width), "-y", str(height), "bash --norc --noprofile " + str(script))

    def tmux(self, *args: str) -> str:
        return subprocess.run([TMUX or "tmux", "-S", self.sock, *args], capture_output=True, text=True,
                              check=True, timeout=30).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def wait(self, cond, what: str) -> str:
        got: list[str] = []

        def check() -> bool:
            got[:] = [self.screen()]
            return bool(cond(got[0]))
        try:
            wait_for(check, timeout=60, interval=0.1, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{got[0] if got else ''!r}") from None
        return got[0]

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys)

    def close(self) -> None:
        subprocess.run([TMUX or "tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=30)


def _row(screen: str, first: str) -> list[str] | None:
    return next((line.split() for line in screen.splitlines() if line.split()[:1] == [first]), None)


@pytest.mark.skipif(TMUX is None, reason="needs tmux")
def test_live_screen_in_a_terminal(mq: MQ, tmp_path: Path) -> None:
    _setup(mq)
    _start_live(mq)
    feeder = mq.feed("orders")
    env = mqctl_env(mq.root, extra={"TERM": "xterm-256color"})
    err = tmp_path / "top.err"
    term = Tmux(tmp_path, " ".join(shlex.quote(a) for a in MQCTL + ["top", "--interval", "0.5"]) + f" 2>{err}",
                env, 100, 30)
    try:
        screen = term.wait(lambda s: _row(s, "orders") is not None, "the topics view")
        assert "1 topic," in screen and "LAST-60S" in screen
        assert feeder.batch([f"f{i}" for i in range(13)])
        stored = next(t["messages"] for t in mq.ok("topic", "list", "--json").json_lines() if t["topic"] == "orders")
        assert stored == 73
        # the new messages show in MESSAGES, and IN/S is no longer 0 (a rate over the last 5 s)
        screen = term.wait(lambda s: (r := _row(s, "orders")) is not None and r[2] == "73" and r[5] != "0.0",
                           "the new messages and their rate")
        term.keys("2")
        lag = _lag(mq, "idle")
        assert lag == 53
        screen = term.wait(lambda s: (r := _row(s, "idle")) is not None and r[2] == str(lag), "idle's lag")
        assert _row(screen, "live") is not None and "GROUP" in screen and "DRAIN" in screen
        # focus by filter: only the matching group stays
        term.keys("/", "idle", "Enter")
        screen = term.wait(lambda s: _row(s, "live") is None and _row(s, "idle") is not None, "the filter")
        assert "filter: /idle" in screen
        term.keys("Escape")
        term.wait(lambda s: _row(s, "live") is not None, "the filter cleared")
        # the locks view: the live group's four held locks, their holder from `mqctl locks`
        holder = mq.ok("locks", "-g", "live", "--json").json_lines()[0]["clientId"]
        term.keys("3")
        screen = term.wait(lambda s: sum(1 for line in s.splitlines() if line.startswith("live ")) == 4, "locks")
        assert all(holder in line and line.rstrip().endswith("held")
                   for line in screen.splitlines() if line.startswith("live "))
        # resize: the screen is drawn again at the new width
        term.tmux("resize-window", "-x", "60", "-y", "20")
        screen = term.wait(lambda s: max(len(line.rstrip()) for line in s.splitlines()) <= 60
                           and sum(1 for line in s.splitlines() if line.startswith("live ")) == 4
                           and len(s.splitlines()) <= 20, "the redraw at 60 columns")
        term.keys("4")
        term.wait(lambda s: "no problems" in s, "the problems view")
        term.keys("Tab")
        term.wait(lambda s: "LAST-60S" in s, "tab back to topics")
        term.keys("q")
        # (the terminal's settings, printed after the exit, are on the screen once SHOWN is)
        screen = term.wait(lambda s: "SHOWN" in s.split(), "the exit and the terminal's settings")
        assert "EXIT=0" in screen
        lines = screen.split()
        assert "icanon" in lines and "echo" in lines, screen    # the terminal as it was, not cbreak
        assert "Traceback" not in screen
        assert err.read_text() == ""
    finally:
        term.close()
        feeder.close()
        print(err.read_text())


def _after_rc(screen: str) -> str | None:
    """The first non-blank line after the last ``RC=`` line of ``screen``, if any."""
    lines = screen.splitlines()
    rc = [i for i, line in enumerate(lines) if line.startswith("RC=")]
    return next((line.strip() for line in lines[rc[-1] + 1:] if line.strip()), None) if rc else None


@pytest.mark.skipif(TMUX is None, reason="needs tmux")
def test_keys_work_again_after_ctrl_z_and_fg(mq: MQ, tmp_path: Path) -> None:
    """Stopped with Ctrl-Z and continued with ``fg`` in an interactive shell, the view reads
    single keys again (bash gives a continued job the terminal in line mode: keys waited for
    Enter), and the shell had its own screen and line mode while the view was stopped."""
    mq.ok("send", "orders", input="a\nb\n")
    # (a prompt of its own: one exported by the caller, as a virtualenv's activate does, may
    # hold neither "$" nor "#")
    env = mqctl_env(mq.root, extra={"TERM": "xterm-256color", "PS1": "$ "})
    top = " ".join(shlex.quote(a) for a in MQCTL + ["top", "--interval", "0.5"])
    term = Tmux(tmp_path, "bash --norc --noprofile -i", env, 100, 30)
    try:
        term.wait(lambda s: "$" in s or "#" in s, "the interactive shell's prompt")
        term.keys(f"{top} 2>{tmp_path / 'top.err'}", "Enter")
        term.wait(lambda s: _row(s, "orders") is not None, "the topics view")
        term.keys("C-z")
        term.wait(lambda s: "Stopped" in s, "the job stopped")
        term.keys("stty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\?icanon'; fg", "Enter")
        term.wait(lambda s: _row(s, "orders") is not None and "Stopped" not in s, "the view again")
        term.keys("2")   # (no Enter: a single key)
        term.wait(lambda s: "DRAIN" in s and "LAST-60S" not in s, "the groups view, by one key")
        term.keys("q")
        term.keys("echo RC=$?; stty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\?icanon'", "Enter")
        # (the exit code, then the terminal's mode: a screen caught between the two lines
        # showed RC=0 without the mode, under load)
        screen = term.wait(lambda s: _after_rc(s) in ("icanon", "-icanon"), "the exit and the terminal's mode")
        assert "RC=0" in screen, screen
        assert screen.split().count("icanon") == 2 and "-icanon" not in screen.split(), screen
        assert (tmp_path / "top.err").read_text() == ""
    finally:
        term.close()


def test_keys_switch_views_and_edit_the_filter() -> None:
    from mqctl.toplive import Screen
    s = Screen()
    for ch, view in (("2", "groups"), ("l", "locks"), ("\t", "problems"), ("\t", "topics"), ("p", "problems")):
        assert s.key(ch) and s.view == view
    for ch in "/ab\x7fc":
        assert s.key(ch)
    assert s.typing and s.filter == "ac"
    assert s.key("q") and s.filter == "acq"        # while typing, q is a letter
    s.key("\r")
    assert not s.typing and s.filter == "acq"
    s.key("\x1b")
    assert s.filter == ""
    assert s.key("q") is False


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_ends_the_live_screen_as_ctrl_c_does(mq: MQ, sig: str) -> None:
    """SIGTERM (``kill``, a supervisor) and SIGHUP end the full screen as Ctrl-C and ``q`` do:
    the terminal back in cooked mode with echo, the main screen and the cursor back, exit 0
    (a long-running view, as ``consume``), no traceback."""
    import signal
    import termios
    master, slave = os.openpty()
    termios.tcsetattr(slave, termios.TCSANOW, termios.tcgetattr(slave))
    before = termios.tcgetattr(slave)
    assert before[3] & termios.ICANON and before[3] & termios.ECHO
    env = mqctl_env(mq.root, extra={"TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"})
    def defaults() -> None:   # (a test runner's children may be started with SIGINT or SIGHUP ignored)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)

    p = subprocess.Popen(MQCTL + ["top"], stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
                         preexec_fn=defaults)
    out = b""
    try:
        def drawn() -> bool:
            nonlocal out
            while __import__("select").select([master], [], [], 0.05)[0]:
                out += os.read(master, 65536)
            return b"\x1b[?1049h" in out and b"TOPIC" in out
        wait_for(drawn, what="the first frame")
        assert termios.tcgetattr(slave)[3] & termios.ICANON == 0   # (cbreak while it runs)
        p.send_signal(getattr(signal, sig))

        def exited() -> bool:
            drawn()   # (read while it ends: its last frames and the terminal's drain must not wait on us)
            return p.poll() is not None
        wait_for(exited, timeout=60, what="top to end")
        assert p.returncode == 0
        drawn()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        after = termios.tcgetattr(slave)
        os.close(slave)
        os.close(master)
    assert after[3] & termios.ICANON and after[3] & termios.ECHO
    assert after == before
    tail = out[out.rindex(b"\x1b[?1049h"):]
    assert b"\x1b[?1049l" in tail and b"\x1b[?25h" in tail    # the main screen, the cursor shown
    assert b"Traceback" not in out and b"error" not in out


@pytest.mark.parametrize("term", ["dumb", ""])
def test_a_terminal_that_cannot_draw_a_screen_gets_the_plain_snapshot(mq: MQ, term: str) -> None:
    """On a dumb terminal (an editor's shell buffer) or one with no TERM, the full screen's
    escapes draw nothing: top prints the plain snapshot, as piped, and exits 0 (it showed
    nothing at all until q before)."""
    import select
    _setup(mq)
    master, slave = os.openpty()
    env = mqctl_env(mq.root, extra={"TERM": term, "COLUMNS": "100", "LINES": "30"})
    p = subprocess.Popen(MQCTL + ["top"], stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    out = b""
    try:
        def exited() -> bool:
            nonlocal out
            while select.select([master], [], [], 0.05)[0]:
                try:
                    out += os.read(master, 65536)
                except OSError:   # (EIO: the slave side closed)
                    break
            return p.poll() is not None
        wait_for(exited, timeout=60, what="top to print its snapshot and end")
        exited()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(slave)
        os.close(master)
    assert p.returncode == 0, out
    assert b"TOPICS" in out and b"GROUPS" in out and b"orders" in out, out
    assert b"\x1b[?1049h" not in out and b"Traceback" not in out


def test_sigterm_ends_the_json_stream_with_exit_0(mq: MQ) -> None:
    import signal
    p = subprocess.Popen(MQCTL + ["top", "--json", "--interval", "0.2"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=mqctl_env(mq.root))
    try:
        assert p.stdout is not None and p.stdout.readline().startswith(b"{")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0 and err == b""


def test_long_names_are_cut_to_fit_the_screen_and_the_columns_stay_in_line() -> None:
    """A topic or group name wider than the screen leaves room: the name is cut with an
    ellipsis (as kcat and rpk do) and the columns after it (LAG, DRAIN, ...) stay on the
    screen, each under its header. They used to be pushed off the screen's edge."""
    from mqctl.toplive import _table
    from mqctl.topview import Section
    group, topic = "g" * 70, "t" * 70
    sec = Section("groups", [("group", "GROUP"), ("topic", "TOPIC"), ("lag", "LAG"), ("drain", "DRAIN")],
                  rows=[{"group": group, "topic": topic, "lag": 12345, "drain": "caught up"},
                        {"group": "short", "topic": "t", "lag": 7, "drain": "-"}])
    lines = _table(sec, 10, 80).plain.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    head, first, second = lines
    assert head.split() == ["GROUP", "TOPIC", "LAG", "DRAIN"], head
    assert first.split()[2:] == ["12345", "caught", "up"] and "…" in first.split()[0], first
    for line, lag in ((first, "12345"), (second, "7")):
        assert line.index(lag) == head.index("LAG"), (head, line)
    assert first.index("caught") == head.index("DRAIN") == second.index("-", len("short")), lines


@pytest.mark.parametrize("columns", [40, 60, 80])
def test_a_narrow_screen_cuts_the_title_and_footer_instead_of_wrapping_them(mq: MQ, columns: int) -> None:
    """Below ~90 columns the title (store path, time, counts) and the footer (keys, the look's
    cost) wrapped onto a second line each, pushing the last rows off the screen."""
    import io

    from rich.console import Console

    import store
    from mqctl.toplive import Screen, render
    _setup(mq)
    with store.Monitor(mq.root) as monitor:
        history = store.History()
        snap = monitor.snapshot()
        history.add(snap)
    for view in ("topics", "groups", "locks", "problems"):
        out = io.StringIO()
        console = Console(file=out, width=columns, height=30, color_system=None, highlight=False)
        console.print(render(snap, history, Screen(view=view), str(mq.root), None, 30, columns))
        lines = out.getvalue().splitlines()
        assert all(len(line) <= columns for line in lines), lines
        assert lines[0].startswith("mqctl top") and lines[-1].startswith("q quit"), lines
        if columns >= 80:   # the store path is cut from its head, so that the counts still show
            shown = lines[0].split()[2]
            assert shown.startswith("…") and shown.endswith("/" + mq.root.name), lines[0]
            assert lines[0].endswith("problems"), lines[0]
        assert not any(line.startswith(("look ", "problems")) for line in lines), lines   # (no wrapped tail)


def test_an_orderly_members_retries_in_place_are_counted(mq: MQ) -> None:
    """An orderly member retries a failed message in place (its queue suspended), without the
    retry topic, whose lag is what counts a concurrent group's retries: its member record says
    how many it retries, and top shows them under problems, then none once they succeed."""
    mq.ok("topic", "create", "ord", "--queues", "2", "--order")
    mq.ok("send", "ord", "a", "--sharding-key", "k")
    gate = mq.work / "failing"
    gate.touch()
    script = handler_script(mq.work / "handler.sh", f"""
        cat > /dev/null
        [ ! -e {gate} ]
    """)
    c = mq.start("consume", "ord", "-g", "G", "--orderly", "--from", "first", "--suspend-ms", "200", "--exec", script)

    def in_place() -> dict:
        return mq.ok("top", "--once", "--json").json_lines()[0]["problems"]["retriesInPlace"]
    try:
        wait_for(lambda: in_place() == {"G": 1}, what="the retry in place to be counted")
        [member] = mq.ok("top", "--once", "--json", "-g", "G").json_lines()[0]["groups"][0]["members"]
        assert member["retryingInPlace"] == 1
        assert "retried in place by orderly members" in mq.ok("top", "--once").out
        assert mq.ok("top", "--once", "--json").json_lines()[0]["problems"]["retries"] == {}
        gate.unlink()
        wait_for(lambda: in_place() == {}, what="the retried message to succeed")
    finally:
        assert c.stop() == 0, c.stderr()
