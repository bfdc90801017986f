"""Start-up cost guards: a command pays only for what it uses.

Not timings (too noisy on shared machines) but module lists: ``mqctl send`` runs under
``python -X importtime`` and must not import a module of :data:`FORBIDDEN_ON_SEND`; the
consumer likewise. Each run also dumps ``sys.modules`` at exit, so a module loaded through
``importlib.import_module`` (which ``-X importtime`` does not report) is caught as well.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.procs import MQCTL, Result, mqctl, mqctl_env, run

# Heavy or irrelevant to one message: the full-featured console stack, the lock library that
# reads package metadata and imports redis-py, data-frame stacks, validation, the command
# groups that `send` does not run, and what they drag in.
HEAVY = ("rich", "redis", "numpy", "pyarrow", "pyspark", "pydantic", "pandas", "importlib.metadata",
         "email", "asyncio", "sortedcontainers", "concurrent.futures", "ctypes")
OTHER_GROUPS = tuple(f"mqctl.commands.{m}" for m in
                     ("init", "topic", "consume", "msg", "storecmd", "tx", "txcheck", "offsets", "progress", "admin",
                      "completion", "dlq", "sparkcmd", "bench"))
FORBIDDEN_ON_SEND = HEAVY + ("portalocker", "store.client.runtime", "mqctl.consumer", "store.log.recovery",
                             "socket", "store.watch", "store.log.offsetcommits") + OTHER_GROUPS
# the consumer needs threads (concurrent.futures)
FORBIDDEN_ON_CONSUME = ("rich", "redis", "numpy", "pyarrow", "pyspark", "pydantic", "pandas", "portalocker",
                        "importlib.metadata", "mqctl.commands.send", "mqctl.commands.tx", "mqctl.commands.bench",
                        "mqctl.commands.sparkcmd", "mqctl.commands.dlq")


def imported(tmp_path: Path, args: list[str]) -> tuple[set[str], int, str]:
    """Modules ``mqctl ARGS`` imports: the ``-X importtime`` report plus ``sys.modules`` at exit."""
    dump = tmp_path / "modules.json"
    code = ("import atexit, json, sys\n"
            f"atexit.register(lambda: open({str(dump)!r}, 'w').write(json.dumps(sorted(sys.modules))))\n"
            "from mqctl.app import main\n"
            "main(sys.argv[1:])\n")
    p = run([sys.executable, "-X", "importtime", "-c", code, *args], args=args, env=mqctl_env(None),
            timeout=120)
    mods = set()
    for line in p.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                mods.add(name)
    if dump.exists():
        mods.update(json.loads(dump.read_text()))
    return mods, p.returncode, p.stderr


def offenders(mods: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in mods for f in forbidden if m == f or m.startswith(f + "."))


def check(tmp_path: Path, args: list[str], forbidden: tuple[str, ...]) -> list[str]:
    mods, code, err = imported(tmp_path, args)
    assert code == 0, err[-2000:]
    assert "mqctl.app" in mods and "typer" in mods   # the report was read
    return offenders(mods, forbidden)


# what inspect imports, which the quick paths defer (mqctl/lazymods.py) and never use (before
# Python 3.12 only: from 3.12 dataclasses uses inspect for every class it builds)
INSPECT_LOADS = ("ast", "dis", "tokenize", "token") if sys.version_info < (3, 12) else ()

# what portalocker drags in (package metadata, hence email; redis-py when installed)
PORTALOCKER_DEPS = ("portalocker", "importlib.metadata", "email", "redis", "socket")


def send_twice(tmp_path: Path, forbidden: tuple[str, ...]) -> list[str]:
    """The second one-message send into a store (the first creates store and topic)."""
    store = tmp_path / "s"
    mqctl(store, "send", "t", "first", check=True, timeout=120)
    return check(tmp_path, ["--store", str(store), "send", "t", "hello"], forbidden)


def test_send_imports_nothing_heavy(tmp_path: Path) -> None:
    bad = send_twice(tmp_path, FORBIDDEN_ON_SEND + PORTALOCKER_DEPS)
    assert bad == [], f"`mqctl send` imports {bad}"


def test_consume_imports_nothing_heavy(tmp_path: Path) -> None:
    store = tmp_path / "s"
    mqctl(store, "send", "t", "x", check=True, timeout=120)
    bad = check(tmp_path, ["--store", str(store), "consume", "t", "-g", "g", "--from", "first", "-e"],
                FORBIDDEN_ON_CONSUME)
    assert bad == [], f"`mqctl consume` imports {bad}"


def test_help_and_version_work_with_lazy_groups(tmp_path: Path) -> None:
    mods, code, _ = imported(tmp_path, ["--version"])
    assert code == 0 and not offenders(mods, OTHER_GROUPS + ("mqctl.commands.send",))
    # the root's help lists every command from the table: no command module is imported
    mods, code, out = imported(tmp_path, ["--help"])
    assert code == 0 and not offenders(mods, HEAVY + OTHER_GROUPS + ("mqctl.commands.send",))
    # a command's help imports that command's module only
    mods, code, _ = imported(tmp_path, ["send", "--help"])
    assert code == 0 and "mqctl.commands.send" in mods and not offenders(mods, HEAVY + OTHER_GROUPS)
    # an unknown command is answered from the table too
    mods, code, _ = imported(tmp_path, ["sned"])
    assert code == 2 and not offenders(mods, OTHER_GROUPS + ("mqctl.commands.send",))


def test_the_table_of_contents_matches_the_modules() -> None:
    """``mqctl.app.GROUPS`` names, per module, exactly what its register() adds, and
    ``SUMMARY`` is each command's own first sentence."""
    import typer

    from mqctl import app as appmod
    from mqctl.helpfmt import ORDER, first_sentence
    for module, names in appmod.GROUPS.items():
        got = typer.main.get_command(appmod.build_app((module,)))
        assert set(got.commands) == set(names), (module, tuple(got.commands))  # type: ignore[attr-defined]
    full = typer.main.get_command(appmod.build_app())
    assert set(full.commands) == set(appmod.COMMAND_MODULE) == set(appmod.SUMMARY) == set(ORDER)  # type: ignore[attr-defined]
    for name, cmd in full.commands.items():  # type: ignore[attr-defined]
        assert appmod.SUMMARY[name] == first_sentence(cmd.help or ""), name


def test_lazy_and_full_root_help_agree(tmp_path: Path) -> None:
    """The root's help from the table (piped) is what the full tree prints."""
    from typer.testing import CliRunner

    from mqctl.app import app
    cp = run([*MQCTL, "--help"], env=mqctl_env(None, extra={"COLUMNS": "80"}), timeout=120)
    lazy = cp.out
    full = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80", "NO_COLOR": "1"}).stdout
    assert cp.returncode == 0

    def listing(page: str) -> list[str]:
        """The panels and their commands, in order."""
        body = page.split("\nProduce and consume:", 1)[1]
        return [line.split()[0] if line.startswith("  ") else line for line in body.splitlines()
                if (line.startswith("  ") and not line.startswith("   ") and line.split()[0] in SUMMARY)
                or (line.endswith(":") and not line.startswith(" "))]

    from mqctl.app import SUMMARY
    assert listing(lazy) == listing(full) and len(listing(lazy)) == len(SUMMARY) + 6


# -- the quick send of mqctl/entry.py ---------------------------------------------------------

def test_the_quick_shape_is_exactly_one_message() -> None:
    from mqctl.entry import quick_send
    assert quick_send(["send", "t", "hello"]) == (None, "t", "hello")
    assert quick_send(["--store", "/s", "send", "t", "a b"]) == ("/s", "t", "a b")
    assert quick_send(["--store=/s", "send", "t", "x"]) == ("/s", "t", "x")
    assert quick_send(["send", "t"]) == (None, "t", None)   # stdin's lines
    assert quick_send(["--store", "/s", "send", "t"]) == ("/s", "t", None)
    for argv in (["send"], ["send", "t", "-"], ["send", "-t", "x"], ["send", "t", "--json"], ["send", "--", "t"], ["send", "t", "x", "-t", "a"], ["send", "-t", "x"],
                 ["send", "t", "--json"], ["consume", "t", "x"], ["--utc", "send", "t", "x"],
                 ["--store", "send", "t", "x"], ["send", "t", "x", "y"], []):
        assert quick_send(argv) is None, argv


def _both(args: list[str]) -> tuple[Result, Result]:
    """``args`` through the quick path (the mqctl script) and through the full Typer app,
    in a user's environment (NO_COLOR unset)."""
    env = mqctl_env(None, extra={"NO_COLOR": None})
    quick = run([*MQCTL, *args], args=args, env=env, timeout=120)
    full = run([sys.executable, "-c", "import sys; from mqctl.app import main; main(sys.argv[1:])", *args],
               args=args, env=env, timeout=120)
    return quick, full


@pytest.mark.parametrize("topic,body", [
    ("t", "hello"),                 # sent
    ("bad name", "x"),              # exit 2
    ("%DLQ%g", "x"),                # reserved: exit 2
    ("t", "x" * 5000),              # over the store's 4000-byte limit: exit 5
])
def test_the_quick_send_answers_as_the_full_command_line(tmp_path: Path, topic: str, body: str) -> None:
    store = tmp_path / "s"
    mqctl(store, "init", "--max-message-size", "4000", "--segment-size", "1048576", check=True, timeout=120)
    mqctl(store, "topic", "create", "t", check=True, timeout=120)   # (the first send would say it made it)
    quick, full = _both(["--store", str(store), "send", topic, body])
    assert quick.returncode == full.returncode, (str(quick), str(full))
    assert re.sub(r"queue \d+", "queue N", quick.stderr) == re.sub(r"queue \d+", "queue N", full.stderr)
    assert quick.stdout == full.stdout == b""


@pytest.mark.parametrize("topic,lines", [
    ("t", b"a\nb\n" + b"x" * 3000 + b"\nlast"),   # sent, the last line without its newline
    ("t", b""),                                     # no input
    ("bad name", b"x\n"),                          # exit 2
    ("t", b"a\n" + b"x" * 5000 + b"\nb\n"),      # line 2 over the 4000-byte limit: exit 5, line 1 sent
])
def test_the_quick_send_of_stdin_answers_as_the_full_command_line(tmp_path: Path, topic: str, lines: bytes) -> None:
    """``producer | mqctl send TOPIC`` takes the quick path too: same messages stored, same
    stderr, same exit code as through the Typer app."""
    stores = []
    for name in ("quick", "full"):
        store = tmp_path / name
        mqctl(store, "init", "--max-message-size", "4000", "--segment-size", "1048576", check=True, timeout=120)
        mqctl(store, "topic", "create", "t", "--queues", "1", check=True, timeout=120)
        stores.append(store)
    env = mqctl_env(None, extra={"NO_COLOR": None})
    args = ["send", topic]
    quick = run([*MQCTL, "--store", str(stores[0]), *args], env=env, timeout=120, input=lines)
    full = run([sys.executable, "-c", "import sys; from mqctl.app import main; main(sys.argv[1:])",
                "--store", str(stores[1]), *args], env=env, timeout=120, input=lines)
    assert quick.returncode == full.returncode, (str(quick), str(full))
    assert re.sub(r", [\d,]+ msg/s", "", quick.stderr) == re.sub(r", [\d,]+ msg/s", "", full.stderr)
    assert quick.stdout == full.stdout == b""
    got = [mqctl(s, "consume", "t", "-g", "g", "--from", "first", "-e", check=True, timeout=120).stdout
           for s in stores]
    assert got[0] == got[1]


def _entry_modules(tmp_path: Path, *args: str, input: bytes | None = None) -> tuple[Result, set[str]]:
    """``mqctl --store S ARGS`` through the script's entry point: its result and every module
    it had imported when it exited."""
    dump = tmp_path / "modules.json"
    code = ("import atexit, json, sys\n"
            # (a module deferred and never used, mqctl/lazymods.py, is a stand-in: not loaded)
            f"atexit.register(lambda: open({str(dump)!r}, 'w').write(json.dumps(sorted("
            "n for n, m in sys.modules.items() if type(m).__name__ != '_StandIn'))))\n"
            "sys.argv = ['mqctl'] + sys.argv[1:]\n"
            "from mqctl.entry import main\n"
            "main()\n")
    cp = run([sys.executable, "-c", code, "--store", str(tmp_path / "s"), *args],
             env=mqctl_env(None, extra={"NO_COLOR": None}), input=input, timeout=120)
    return cp, set(json.loads(dump.read_text()))


def _send_modules(tmp_path: Path, *args: str, input: bytes | None = None) -> tuple[Result, set[str]]:
    """``mqctl --store S send ARGS`` through the script's entry point (:func:`_entry_modules`)."""
    return _entry_modules(tmp_path, "send", *args, input=input)


def test_the_quick_send_imports_no_typer(tmp_path: Path) -> None:
    for _ in range(2):   # the second send: a store that exists, as in a shell loop
        cp, mods = _send_modules(tmp_path, "t", "x")
    assert cp.returncode == 0, cp.stderr
    assert not offenders(mods, ("typer", "rich", "click", "mqctl.app", "mqctl.options") + FORBIDDEN_ON_SEND), \
        offenders(mods, ("typer", "rich", "click", "mqctl.app", "mqctl.options"))
    # inspect, which dataclasses imports, is deferred (mqctl/lazymods.py): what it loads is not
    assert not offenders(mods, INSPECT_LOADS), offenders(mods, INSPECT_LOADS)


def test_the_quick_send_of_stdin_imports_no_typer(tmp_path: Path) -> None:
    """``producer | mqctl send TOPIC``: no Typer, no console stack, no other command group;
    big lines (their record CRCs combined through zlib's library) without ``ctypes.util``,
    which runs ``ldconfig`` in a subprocess to find it; a new topic without ``shutil`` (and
    the compressors it imports), which only removing an old topic's queues needs."""
    cp, mods = _send_modules(tmp_path, "t", input=b"a\nb\n" + (b"x" * 65536 + b"\n") * 3)
    assert cp.returncode == 0 and "sent 5 messages" in cp.stderr, cp.stderr
    unwanted = ("typer", "rich", "click", "mqctl.app", "mqctl.options", "ctypes.util", "subprocess",
                "shutil", "bz2", "lzma") + OTHER_GROUPS
    assert not offenders(mods, unwanted), offenders(mods, unwanted)


def test_the_quick_send_imports_no_typing(tmp_path: Path) -> None:
    """``typing`` costs a send's process ~3 ms and nothing on its path needs it at run time
    (its modules take ``TYPE_CHECKING`` without it: store/__init__.py): a body given as an
    argument into a new store and into one that exists, and big lines from stdin."""
    for args, stdin in ((("t", "x"), None), (("t", "y"), None), (("t",), b"a\nb\n" + (b"x" * 65536 + b"\n") * 3)):
        cp, mods = _send_modules(tmp_path, *args, input=stdin)
        assert cp.returncode == 0, cp.stderr
        assert "typing" not in mods, args


def test_the_quick_paths_load_no_array_layouts(tmp_path: Path) -> None:
    """``store/log/arrays.py`` (numpy's dtypes, a frozen dataclass built on import) serves the
    array paths of big batches and backlogs: a one-message send, a few lines from stdin and
    a short consume never load it."""
    for args, stdin in ((("send", "t", "x"), None), (("send", "t", "y"), None), (("send", "t"), b"a\nb\n"),
                        (("consume", "t", "-g", "g", "-o", "first", "-e"), None)):
        cp, mods = _entry_modules(tmp_path, *args, input=stdin)
        assert cp.returncode == 0, cp.stderr
        assert "store.log.arrays" not in mods, args


def test_a_few_lines_from_stdin_load_no_ctypes(tmp_path: Path) -> None:
    """``seq 10 | mqctl send TOPIC``: the allocator is tuned for big buffers (ctypes, for
    glibc's mallopt) only once a read of stdin is big, not for a few lines read at once."""
    for _ in range(2):   # the second: a store that exists
        cp, mods = _send_modules(tmp_path, "t", input=b"".join(b"%d\n" % i for i in range(1, 11)))
    assert cp.returncode == 0 and "sent 10 messages" in cp.stderr, cp.stderr
    assert not offenders(mods, ("ctypes",)), offenders(mods, ("ctypes",))


def test_big_batches_tune_the_allocator_without_ctypes(tmp_path: Path) -> None:
    """A send of big lines from stdin and a one-shot consume of big batches tune the
    allocator for big buffers (``store.keep_big_buffers``) through the store's C module, not
    by loading ctypes (~1-2 ms of such a process)."""
    from store.log import nativecheck
    if not hasattr(nativecheck, "keep_big_buffers"):
        # (a checkout whose module predates it: `pip install -e .` builds it again; CI's
        # fresh install always has it, so there the test fails rather than skips)
        if os.environ.get("CI"):
            pytest.fail("the C module has no keep_big_buffers: built from an older source")
        pytest.skip("the C module was built from an older source")
    line = b"x" * (1100 << 10) + b"\n"   # (a batch of one of them is big)
    cp, mods = _send_modules(tmp_path, "t", input=line * 4)
    assert cp.returncode == 0 and "sent 4 messages" in cp.stderr, cp.stderr
    assert not offenders(mods, ("ctypes",)), offenders(mods, ("ctypes",))
    cp, mods = _entry_modules(tmp_path, "consume", "t", "-g", "g", "-o", "first", "-e")
    assert cp.returncode == 0 and cp.stdout.count(b"\n") == 4, cp.stderr
    assert not offenders(mods, ("ctypes",)), offenders(mods, ("ctypes",))


def test_the_first_send_into_a_new_store_recovers_nothing(tmp_path: Path) -> None:
    """A store is made with its checkpoint: the first writer of a new store (a send that
    makes store and topic, or a pipe into a topic ``topic create`` made) finds it clean, and
    neither loads the recovery modules nor fsyncs every directory of the store."""
    cp, mods = _send_modules(tmp_path, "t", "x")
    assert cp.returncode == 0 and "sent 1 message" in cp.stderr, cp.stderr
    assert not offenders(mods, ("store.log.recovery",)), offenders(mods, ("store.log.recovery",))
    other = tmp_path / "other"
    other.mkdir()
    mqctl(other / "s", "topic", "create", "t", check=True, timeout=120)
    cp, mods = _send_modules(other, "t", input=b"a\n" + b"y" * 65536 + b"\n")
    assert cp.returncode == 0 and "sent 2 messages" in cp.stderr, cp.stderr
    assert not offenders(mods, ("store.log.recovery",)), offenders(mods, ("store.log.recovery",))
    got = mqctl(other / "s", "consume", "t", "-g", "g", "--from", "first", "-e", check=True, timeout=120).stdout
    assert sorted(got.split(b"\n")[:-1]) == [b"a", b"y" * 65536]


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_the_version_alone_answers_as_the_full_command_line_without_typer(tmp_path: Path, flag: str) -> None:
    """``mqctl --version`` (what a script runs to see that mqctl is there) is the script's own
    answer, the root's text and exit code, without building the Typer app."""
    quick, full = _both([flag])
    assert (quick.returncode, quick.stdout, quick.stderr) == (full.returncode, full.stdout, full.stderr) == \
        (0, b"mqctl 0.1.0\n", ""), (str(quick), str(full))
    cp, mods = _entry_modules(tmp_path, flag)   # (as ``mqctl --store S --version``)
    assert cp.returncode == 0 and cp.stdout == b"mqctl 0.1.0\n" and not offenders(mods, ("typer", "rich", "click", "mqctl.app")), \
        offenders(mods, ("typer", "rich", "click", "mqctl.app"))


# -- the quick consume of mqctl/entry.py ------------------------------------------------------

def test_the_quick_consume_shape() -> None:
    from mqctl.entry import quick_consume
    assert quick_consume(["consume", "t", "-g", "g", "--from", "first", "-e"]) == \
        (None, {"topic": "t", "group": "g", "from_": "first", "exit_at_end": True})
    assert quick_consume(["--store", "/s", "consume", "t", "--group=g", "-o", "-10", "-j", "-c", "5"]) == \
        ("/s", {"topic": "t", "group": "g", "from_": "-10", "json": True, "count": 5})
    assert quick_consume(["--store=/s", "consume", "t", "--no-group", "--idle-timeout", "2s", "--exit-at-end",
                          "--json", "--count=3", "--from=last"]) == \
        ("/s", {"topic": "t", "no_group": True, "idle_timeout": "2s", "exit_at_end": True, "json": True,
                "count": 3, "from_": "last"})
    for argv in (["consume"], ["consume", "-g", "g", "t"], ["consume", "t", "-g"], ["consume", "t", "-g", "a", "-g", "b"],
                 ["consume", "t", "-g", "g", "--exec", "cat"], ["consume", "t", "-g", "g", "--orderly"],
                 ["consume", "t", "-g=g"], ["consume", "t", "-e=1"], ["consume", "t", "-g", "g", "-ej"],
                 ["consume", "t", "-g", "g", "--count", "0"], ["consume", "t", "-c", "x"], ["consume", "t", "-c", "-1"],
                 ["consume", "t", "-g", "g", "--store", "/s"], ["--utc", "consume", "t", "-g", "g"],
                 ["consume", "t", "-g", "g", "--help"], ["consume", "t", "-g", "g", "--"], ["consume", "t", "extra"],
                 ["--store", "consume", "t", "-g", "g"], ["send", "t", "x", "-g", "g"]):
        assert quick_consume(argv) is None, argv


def _run_both(args: list[str], store: Path | None) -> tuple[Result, Result]:
    """``mqctl ARGS`` through the script (its quick path) and through the Typer app, each on a
    copy of ``store`` (a consume commits), in a user's environment."""
    import shutil
    results = []
    for kind in ("quick", "full"):
        argv = list(args)
        if store is not None:
            copy = store.parent / f"{store.name}-{kind}"
            shutil.copytree(store, copy)
            argv = ["--store", str(copy), *args]
        env = mqctl_env(None, extra={"NO_COLOR": None})
        cmd = MQCTL if kind == "quick" else [sys.executable, "-c",
                                              "import sys; from mqctl.app import main; main(sys.argv[1:])"]
        results.append(run([*cmd, *argv], args=argv, env=env, timeout=120))
    return results[0], results[1]


@pytest.mark.parametrize("args", [
    ["consume", "t", "-g", "g", "--from", "first", "-e"],            # every message, raw
    ["consume", "t", "-g", "g", "-o", "first", "-e", "--json"],      # envelopes
    ["consume", "t", "-g", "g", "-o", "first", "-c", "3"],           # three of them
    ["consume", "t", "--no-group", "-o", "-2", "-e"],                # kcat's two before the end
    ["consume", "t", "--no-group", "-o", "1", "-e"],                 # every queue from its offset 1
    ["consume", "t", "-o", "first", "-e"],                           # no group: exit 2
    ["consume", "t", "-g", "g", "--no-group", "-e"],                 # both: exit 2
    ["consume", "t", "-g", "g", "-o", "5", "-e"],                    # a queue offset needs --no-group: exit 2
    ["consume", "t", "-g", "g", "-o", "yesterday-ish", "-e"],        # not a time: exit 2
    ["consume", "t", "-g", "g", "-o", "@-1h", "-e"],                 # rpk's @TIME
    ["consume", "t", "--no-group", "-o", "@2020-01-01", "-e"],
    ["consume", "t", "--no-group", "-o", "s@1577836800000", "-e"],   # kcat's s@MS
    ["consume", "t", "-g", "g", "-o", "@nonsense", "-e"],            # exit 2
    ["consume", "t", "-g", "g", "--idle-timeout", "soon", "-e"],     # not a duration: exit 2
    ["consume", "bad name", "-g", "g", "-e"],                        # exit 2
    ["consume", "nosuch", "-g", "g", "-e"],                          # exit 3
    ["consume", "t", "-g", "bad group!", "-e"],                      # exit 2
    ["consume", "nosuch", "-g", "g", "--idle-timeout", "0"],         # waits for the topic, then stops: exit 0
])
def test_the_quick_consume_answers_as_the_full_command_line(tmp_path: Path, args: list[str]) -> None:
    """``mqctl consume`` on the quick path and through Typer: same stdout, stderr, exit code,
    and the same offsets committed."""
    from tests.procs import mqctl as run_mqctl
    store = tmp_path / "s"
    run_mqctl(store, "topic", "create", "t", "--queues", "3", check=True, timeout=120)
    for i in range(7):
        run_mqctl(store, "send", "t", f"m{i}", "-k", f"k{i}", check=True, timeout=120)
    quick, full = _run_both(args, store)
    assert quick.returncode == full.returncode, (str(quick), str(full))

    def same(text: bytes | str) -> str:
        text = text.decode() if isinstance(text, bytes) else text
        text = re.sub(r'"(storeTimestamp|bornTimestamp)": ?\d+', "", text)
        return re.sub(r"\d{4}-\d\d-\d\dT[^ ,\"]+", "TIME", text)
    assert same(quick.stdout) == same(full.stdout) and same(quick.stderr) == same(full.stderr)
    if quick.returncode == 0 and "-g" in args and args[1] == "t":
        offsets = [run_mqctl(tmp_path / f"s-{kind}", "offsets", "show", "--group", "g", "--json",
                             check=True, timeout=120).stdout for kind in ("quick", "full")]
        assert offsets[0] == offsets[1]


def test_the_quick_consume_without_a_store_answers_as_the_full_command_line(tmp_path: Path) -> None:
    quick, full = _run_both(["--store", str(tmp_path / "none"), "consume", "t", "-g", "g", "-e"], None)
    assert quick.returncode == full.returncode == 3 and quick.stderr == full.stderr and quick.stdout == full.stdout == b""


# What no consumer loads (the quick consume, and a Python consumer): the write path's modules
# (a consumer writes no message), hashlib's OpenSSL bindings, sortedcontainers (orderly
# in-flight messages are a few, in a dict): ~10 ms of each consumer's start-up together,
# measured; nor the key index (a consumer looks no key up: the store makes it on first use,
# and its module with array, ~1 ms).
CONSUMER_NEVER_LOADS = ("store.log.framing", "store.log.arrayframing", "store.log.writebatch",
                        "hashlib", "_hashlib", "sortedcontainers", "store.log.index")


# What the quick consume writing inline does not load: concurrent.futures (and the
# logging, traceback and textwrap it imports, their regular expressions compiled: ~3 ms) —
# the offsets' writer is a plain thread, a pool only for --exec and Python handlers; logging
# (a queue lock's warnings go to the consumer's own warn); datetime (only a date printed or
# read, not `--from first` nor a duration); termios (only for a terminal on stdout); a send's
# results (store/client/sendresult.py); the client's messages and rows (store/client/message.py:
# a Python consumer's, built from the pulled columns; the command line writes records); the
def test_a_waiting_consumer_watches_the_store_without_ctypes(tmp_path: Path) -> None:
    """A consumer that waits for messages watches the store through inotify's calls in the
    store's C module, not libc's through ctypes (whose import cost its first turn 3-5 ms,
    before its first message)."""
    from store.log import nativecheck
    if not hasattr(nativecheck, "inotify_open"):
        if os.environ.get("CI"):   # (as above: a fresh install has it)
            pytest.fail("the C module has no inotify_open: built from an older source")
        pytest.skip("the C module was built from an older source")
    from tests.procs import mqctl as run_mqctl
    run_mqctl(tmp_path / "s", "send", "t", "m0", check=True, timeout=120)
    cp, mods = _entry_modules(tmp_path, "consume", "t", "-g", "g", "-o", "first", "--idle-timeout", "0.3")
    assert cp.returncode == 0 and cp.stdout == b"m0\n", cp.stderr
    assert "store.inotify" in mods   # (it waited, watching)
    assert not offenders(mods, ("ctypes",)), offenders(mods, ("ctypes",))


# store's results (store/log/results.py: its dataclasses cost each member of a group ~2 ms at
# its first message; a queue's bodies pulled alone come as the store's columns); typing
# (~3 ms: the consumer runtime's modules import its names under a local TYPE_CHECKING, as the
# send path's do, and tell a pool sink by its members, not by a runtime-checked Protocol); what
# inspect loads (~4 ms: dataclasses imports it for classes without a docstring, and the quick
# paths defer it, mqctl/lazymods.py) and ipaddress (pathlib's urllib.parse imports it); the
# delay scheduler's progress file (store/log/positions.py: no delayed message, nothing to read)
# and the queue lock table of monitors (store/client/locktable.py).
QUICK_CONSUME_NEVER_LOADS = ("concurrent", "logging", "traceback", "textwrap", "datetime", "_datetime",
                             "termios", "store.client.sendresult", "store.client.message", "store.log.results",
                             "typing", "ipaddress", "store.log.positions", "store.client.locktable") + INSPECT_LOADS


@pytest.mark.parametrize("queues", ["one", "three"])
def test_the_quick_consume_imports_no_typer(tmp_path: Path, queues: str) -> None:
    """``mqctl consume T -g G -e > file`` through the script: no Typer, no console stack, no
    other command's module, not the --exec handlers' machinery (threads, spawning), not numpy
    for a small backlog, not what only a producer uses (random: a first queue's pick). The
    messages in one queue (that queue's bodies pulled alone) or in three (one shared read)."""
    from tests.procs import mqctl as run_mqctl
    store = tmp_path / "s"
    for i in range(3):
        run_mqctl(store, "send", "t", f"m{i}", "--queue", "0" if queues == "one" else str(i), check=True, timeout=120)
    cp, modules = _entry_modules(tmp_path, "consume", "t", "-g", "g", "-o", "first", "-e")
    assert cp.returncode == 0 and sorted(cp.stdout.split()) == [b"m0", b"m1", b"m2"], cp.stderr
    unwanted = ("typer", "rich", "click", "mqctl.app", "mqctl.options", "mqctl.commands", "mqctl.consumer.handlers",
                "numpy", "shlex", "random", "shutil") + FORBIDDEN_ON_CONSUME + CONSUMER_NEVER_LOADS \
        + QUICK_CONSUME_NEVER_LOADS
    assert not offenders(modules, unwanted), offenders(modules, unwanted)


def test_the_quick_consume_of_envelopes_imports_no_typing(tmp_path: Path) -> None:
    """``mqctl consume T -g G -e --json``: the envelopes' module, the shared read of several
    queues and the consumer runtime load no ``typing``, as a raw consume does not."""
    from tests.procs import mqctl as run_mqctl
    store = tmp_path / "s"
    for i in range(3):
        run_mqctl(store, "send", "t", f"m{i}", "--queue", str(i), check=True, timeout=120)
    cp, modules = _entry_modules(tmp_path, "consume", "t", "-g", "g", "-o", "first", "-e", "--json")
    assert cp.returncode == 0 and len(cp.stdout.splitlines()) == 3, cp.stderr
    assert not offenders(modules, ("typing", "typer", "mqctl.app")), offenders(modules, ("typing", "typer", "mqctl.app"))


# -- the collector during a quick path's start-up (mqctl/startgc.py) -------------------------

def _collector_at_exit(tmp_path: Path, *args: str, input: bytes | None = None) -> tuple[Result, dict[str, object]]:
    """``mqctl --store S ARGS`` through the script's entry point: whether the cyclic collector
    was on when the command ended, and its collections of the older generations."""
    dump = tmp_path / "gc.json"
    code = ("import atexit, gc, json, sys\n"
            f"atexit.register(lambda: open({str(dump)!r}, 'w').write(json.dumps("
            "{'enabled': gc.isenabled(), 'stats': gc.get_stats()})))\n"
            "sys.argv = ['mqctl'] + sys.argv[1:]\n"
            "from mqctl.entry import main\n"
            "main()\n")
    cp = run([sys.executable, "-c", code, "--store", str(tmp_path / "s"), *args],
             env=mqctl_env(None, extra={"NO_COLOR": None}), input=input, timeout=120)
    return cp, json.loads(dump.read_text())


def test_the_quick_paths_collect_again_once_started(tmp_path: Path) -> None:
    """The quick consume and the quick send of stdin hold the collector while they load their
    modules, and turn it back on before they consume or read: a long-running consumer or
    sender collects its cycles."""
    cp, got = _collector_at_exit(tmp_path, "send", "t", input=b"a\nb\n")
    assert cp.returncode == 0 and got["enabled"] is True, (cp.stderr, got)
    cp, got = _collector_at_exit(tmp_path, "consume", "t", "-g", "g", "--from", "first", "-e")
    # (a and b went to two queues: read in either order)
    assert cp.returncode == 0 and sorted(cp.stdout.split()) == [b"a", b"b"] and got["enabled"] is True, (cp.stderr, got)


def test_holding_the_collector() -> None:
    """hold() turns an enabled collector off until release(), which freezes what was made
    meanwhile; release() without hold() (the Typer path, the Python API) changes nothing."""
    import gc

    from mqctl import startgc
    assert gc.isenabled()
    startgc.release()
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    try:
        startgc.hold()
        assert not gc.isenabled()
        kept = [[i] for i in range(1000)]
        startgc.release()
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(kept)
    finally:
        gc.unfreeze()
        gc.enable()


def test_the_quick_paths_build_no_dataclass_docstring(tmp_path: Path) -> None:
    """A dataclass without a docstring gets one from ``inspect.signature`` as its class is
    built (~0.1 ms each): every record the quick consume and send load says what it is (a
    store that exists: its creation, and a recovery, load more)."""
    dump = tmp_path / "undocumented.json"
    code = ("import atexit, dataclasses, json, sys\n"
            "def undocumented():\n"
            "    return sorted(f'{m.__name__}.{c.__qualname__}' for m in list(sys.modules.values())\n"
            "                  if m and m.__name__.split('.')[0] in ('store', 'mqctl')\n"
            "                  for c in vars(m).values() if isinstance(c, type) and c.__module__ == m.__name__\n"
            "                  and dataclasses.is_dataclass(c) and (c.__doc__ or '').startswith(c.__name__ + '('))\n"
            f"atexit.register(lambda: open({str(dump)!r}, 'w').write(json.dumps(undocumented())))\n"
            "sys.argv = ['mqctl'] + sys.argv[1:]\n"
            "from mqctl.entry import main\n"
            "main()\n")
    env = mqctl_env(None, extra={"NO_COLOR": None})
    mqctl(tmp_path / "s", "send", "t", "first", check=True, timeout=120)
    for args, stdin in ((["send", "t"], b"a\nb\n"), (["consume", "t", "-g", "g", "-o", "first", "-e"], None)):
        cp = run([sys.executable, "-c", code, "--store", str(tmp_path / "s"), *args], env=env, input=stdin, timeout=120)
        assert cp.returncode == 0, cp.stderr
        assert json.loads(dump.read_text()) == [], (args, dump.read_text())


# Ctrl-C lands while a module loads (as it does in the first tenth of a second, while Typer or
# the store is imported, before the command's error guard is in place): a finder that raises
# KeyboardInterrupt on that module's import makes the moment exact.
_INTERRUPT_ON_IMPORT = """
import sys
module = sys.argv.pop(1)
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
from mqctl.entry import main
main()
"""


@pytest.mark.parametrize(("module", "args"), [
    ("typer", ["topic", "list"]),                  # the Typer path, while Typer loads
    ("mqctl.app", ["topic", "list"]),
    ("store", ["send", "t", "x"]),                 # the quick send, while the store loads
    ("mqctl.sender", ["send", "t", "x"]),
    ("store", ["--version"]),
])
def test_ctrl_c_while_starting_is_one_line_and_130(tmp_path: Path, module: str, args: list[str]) -> None:
    mqctl(tmp_path / "s", "init", check=True, timeout=120)
    p = run([sys.executable, "-c", _INTERRUPT_ON_IMPORT, module, "--store", str(tmp_path / "s"), *args],
            env=mqctl_env(None), timeout=120)
    assert (p.returncode, p.stderr) == (130, "mqctl: error: interrupted\n")
    assert p.stdout == b""
