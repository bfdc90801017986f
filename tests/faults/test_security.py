"""Security: private files, no path outside the store, no shell, nothing from the store
evaluated, and a store owned by someone else refused."""
from __future__ import annotations

import ast
import json
import os
import re
import stat
from pathlib import Path

import pytest

from tests.faults.faultutil import LOGGING_HANDLER
from tests.procs import KILLED, MQ, handler_script, one_error, run_inprocess

REPO = Path(__file__).resolve().parents[2]


def tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


# -- private files ----------------------------------------------------------------------------------

def test_every_file_and_directory_is_private(tmp_path: Path) -> None:
    """A session that touches every kind of file, run with umask 000: directories 0700, files
    0600, whatever the umask."""
    mq = MQ(tmp_path / "umask0", tmp_path)  # not the fixture's: init itself runs under umask 000
    env = {"HANDLER_LOG": str(tmp_path / "h.log")}
    handler = handler_script(tmp_path / "h.sh", LOGGING_HANDLER)
    answer = handler_script(tmp_path / "answer.sh", "#!/bin/sh\necho COMMIT\n")
    old = os.umask(0)
    try:
        mq.ok("init")
        mq.ok("topic", "create", "t", "--queues", "2")
        mq.ok("send", "t", "--keys", "k", "--key-delimiter", ":", input="a:1\nb:2\n")
        mq.ok("send", "t", "later", "--delay", "1")
        mq.ok("consume", "t", "-g", "G", "--from", "first", "-e", "--dedup")
        mq.ok("consume", "t", "-g", "E", "--from", "first", "-e", "--exec", handler, extra_env=env)
        mq.ok("consume", "t", "-g", "B", "--broadcast", "--client-id", "c1", "--from", "first", "-e")
        assert mq.run("consume", "t", "-g", "O", "--orderly", "--from", "first", "--count", "1",
                      failpoints="rebalance-after-lock:2").returncode == KILLED  # leaves lock records
        tx = json.loads(mq.ok("tx", "send", "t", "tx-body").stdout)["txId"]
        mq.ok("tx", "commit", tx)
        mq.ok("tx", "send", "t", "tx-2")
        mq.ok("tx", "check", "--check-cmd", answer, "--timeout", "0")
        mq.ok("tx", "check", "--check-cmd", answer, "--timeout", "0")
        mq.ok("offsets", "reset", "--group", "G", "--topic", "t", "--to-earliest", "--execute")
        mq.ok("store", "recover")
    finally:
        os.umask(old)
    seen = {"dir": 0, "file": 0}
    for p in [mq.root, *mq.root.rglob("*")]:
        st = os.lstat(p)
        assert not stat.S_ISLNK(st.st_mode), f"{p} is a symlink"
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            seen["dir"] += 1
            assert mode == 0o700, f"{p}: directory mode {mode:o}"
        else:
            seen["file"] += 1
            assert mode == 0o600, f"{p}: file mode {mode:o}"
    names = tree(mq.root)
    for part in ("commitlog", "index", "config/consumerOffset.json", "config/topics", "checkpoint",
                 "locks", "consumers", "offsets", "tx", "dedup"):
        assert any(n == part or n.startswith(part + "/") for n in names), f"the session made no {part}"
    assert seen["file"] > 20


# -- no path outside the store ------------------------------------------------------------------------

HOSTILE = ["../evil", "../../evil", "/tmp/evil", "a/../../evil", "..", ".", "evil/..", "x" * 5000,
           "evil\\..\\x", "~", "~root", "$HOME", "a b", "-", "\nevil", "%2e%2e"]


def _commands(value: str) -> list[list[str]]:
    return [
        ["topic", "create", value],
        ["send", value, "body"],
        ["consume", "t", "-g", value, "-e"],
        ["consume", "t", "-g", "G", "-e", "--client-id", value],
        ["consume", "t", "-g", "G", "-e", "--broadcast", "--client-id", value],
        ["offsets", "show", "--group", value],
        ["offsets", "reset", "--group", value, "--topic", "t", "--to-earliest", "--execute"],
        ["offsets", "reset", "--group", "G", "--topic", value, "--to-earliest", "--execute"],
        ["dlq", "list", "--group", value],
        ["consumers", "--group", value],
        ["locks", "--group", value],
        ["rebalance", "t", "--group", value],
        ["rebalance", value, "--group", "G"],
        ["topic", "status", value],
        ["topic", "delete", value, "--yes"],
        ["msg", "show", value],
        ["msg", "query", "--topic", value, "--key", "k"],
        ["tx", "commit", value],
    ]


def test_no_name_or_id_reaches_outside_the_store(mq: MQ, tmp_path: Path) -> None:
    mq.ok("send", "t", "-q", "0", "one")
    mq.ok("consume", "t", "-g", "G", "--from", "first", "-e")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    before_outside = tree(tmp_path) - {n for n in tree(tmp_path) if n.startswith("store")}
    before_store = tree(mq.root)
    for value in HOSTILE:
        for args in _commands(value):
            res = run_inprocess(["--store", str(mq.root), *args], workdir=tmp_path)
            assert "Traceback" not in res.stderr and "internal error" not in res.stderr, str(res)
            if res.returncode != 0:
                assert res.returncode in (2, 3), str(res)  # a bad name (2), or nothing by that id (3)
                one_error(res, res.returncode, allow_warnings=True)
            if args[:2] in (["msg", "show"], ["tx", "commit"]):
                assert res.returncode == 3, str(res)
            elif not re.fullmatch(r"[A-Za-z0-9_%|-]{1,127}", value):  # (%2e%2e is a plain name here)
                assert res.returncode == 2, str(res)
    after_outside = tree(tmp_path) - {n for n in tree(tmp_path) if n.startswith("store")}
    assert after_outside == before_outside, f"created outside the store: {after_outside - before_outside}"
    assert not list(Path("/tmp").glob("evil*"))
    new_in_store = tree(mq.root) - before_store
    assert not [n for n in new_in_store if "evil" in n or ".." in n], new_in_store


def test_nul_and_huge_names_in_real_processes(mq: MQ, tmp_path: Path) -> None:
    mq.ok("send", "t", "x")
    for args in (["send", "../x" * 40, "b"], ["consume", "t", "-g", "/etc/passwd", "-e"],
                 ["consume", "t", "-g", "G", "-e", "--client-id", "../../" + "x" * 300]):
        one_error(mq.run(*args), 2)
    res = run_inprocess(["--store", str(mq.root), "send", "a\x00b", "x"])
    one_error(res, 2)
    res = run_inprocess(["--store", str(mq.root), "consume", "t", "-g", "G\x00/../x", "-e"])
    one_error(res, 2)


def test_a_trailing_newline_is_not_part_of_a_valid_name(mq: MQ) -> None:
    for args in (["topic", "create", "evil\n"], ["consume", "t", "-g", "evil\n", "-e"],
                 ["consume", "t", "-g", "G", "-e", "--client-id", "evil\n"]):
        res = run_inprocess(["--store", str(mq.root), *args])
        assert res.returncode == 2, str(res)


# -- no shell ------------------------------------------------------------------------------------------

def test_handlers_run_without_a_shell(mq: MQ, tmp_path: Path) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    pwned = work / "PWNED"
    env_dump = tmp_path / "env.txt"
    dump = handler_script(tmp_path / "dump.sh", f"""
        #!/bin/sh
        cat > /dev/null
        printf '%s|%s|%s\\n' "$MQ_KEYS" "$MQ_TAGS" "$MQ_TOPIC" >> {env_dump}
    """)
    mq.ok("send", "t", "-q", "0", "--keys", "$(touch${IFS}PWNED)", "--tag", "`touch PWNED`",
          input="; touch PWNED\n$(touch PWNED)\n")
    hostile_cmds = [f"{dump} $(touch PWNED)", f"{dump}; touch PWNED", f"{dump} && touch PWNED", f"{dump} | touch PWNED",
                    f"{dump} `touch PWNED`"]
    for i, cmd in enumerate(hostile_cmds):
        res = mq.run("consume", "t", "-g", f"G{i}", "--from", "first", "-e", "--exec", cmd, cwd=work)
        # run as plain argv: the extra words are arguments, or "dump.sh;" is no program
        assert res.returncode == 0 or "cannot run handler" in res.stderr, res.stderr
        assert not pwned.exists(), f"a shell ran {cmd!r}"
    assert "$(touch${IFS}PWNED)|`touch PWNED`|t" in env_dump.read_text()
    # a command line that needs a shell is not one: the program "true;" does not exist
    res = mq.run("consume", "t", "-g", "Gx", "--from", "first", "-e", "--exec", "true; touch PWNED", cwd=work)
    assert res.returncode == 1 and "mqctl: error:" in res.stderr
    # the transaction check command and the local transaction, too
    mq.ok("tx", "send", "t", "$(touch PWNED)")
    res = mq.run("tx", "check", "--check-cmd", "echo COMMIT; touch PWNED", "--timeout", "0", cwd=work)
    assert "Traceback" not in res.stderr
    res = mq.run("tx", "send", "t", "b", "--exec", "true $(touch PWNED)", cwd=work)
    assert "Traceback" not in res.stderr
    assert not pwned.exists()


# -- nothing from the store is evaluated ------------------------------------------------------------------

FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "jsonpickle"}


SUBPROCESS_CALLS = {"Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}


def _own_module(arg: ast.expr) -> bool:
    """``import_module("x")`` or ``import_module(f".{name}", __name__)``: a module of ours."""
    if isinstance(arg, ast.Constant):
        return True
    return (isinstance(arg, ast.JoinedStr) and bool(arg.values) and isinstance(arg.values[0], ast.Constant)
            and str(arg.values[0].value).startswith("."))


def _sources() -> list[Path]:
    return sorted([*(REPO / "store").rglob("*.py"), *(REPO / "mqctl").rglob("*.py")])


def test_no_eval_pickle_or_shell_in_the_source() -> None:
    """Static: store data is parsed (JSON, struct), never evaluated or unpickled, and no
    command runs through a shell."""
    problems = []
    for path in _sources():
        tree_ = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree_):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for mod in mods:
                    if mod.split(".")[0] in FORBIDDEN_MODULES:
                        problems.append(f"{where}: imports {mod}")
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
                if isinstance(f, ast.Name) and name in ("eval", "exec", "compile", "__import__"):
                    problems.append(f"{where}: calls {name}()")
                if owner == "os" and name in ("system", "popen") or owner in ("commands",):
                    problems.append(f"{where}: runs a shell via {owner}.{name}")
                if owner == "yaml" and name in ("load", "unsafe_load", "full_load"):
                    problems.append(f"{where}: yaml.{name}")
                if owner == "importlib" and name == "import_module" and node.args and not _own_module(node.args[0]):
                    problems.append(f"{where}: imports a module named at run time")
                for kw in node.keywords:
                    if (kw.arg == "shell" and name in SUBPROCESS_CALLS
                            and not (isinstance(kw.value, ast.Constant) and kw.value.value is False)):
                        problems.append(f"{where}: {name}(shell=...)")
    assert not problems, "\n".join(problems)


def test_the_static_check_catches_what_it_looks_for(tmp_path: Path) -> None:
    """The static test above is able to fail: run its rules over a file that breaks them."""
    bad = "import pickle\nimport os, subprocess\neval('1')\nos.system('x')\nsubprocess.run('x', shell=True)\n"
    found = []
    for node in ast.walk(ast.parse(bad)):
        if isinstance(node, ast.Import) and any(a.name in FORBIDDEN_MODULES for a in node.names):
            found.append("import")
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "eval":
                found.append("eval")
            if isinstance(f, ast.Attribute) and f.attr == "system":
                found.append("system")
            if any(kw.arg == "shell" for kw in node.keywords):
                found.append("shell")
    assert found == ["import", "eval", "system", "shell"]


# -- a store owned by another user ---------------------------------------------------------------------------

def test_a_store_owned_by_another_user_is_refused(mq: MQ) -> None:
    if os.getuid() != 0:
        pytest.skip("chown to another uid needs root")
    mq.ok("send", "t", "one")
    for p in [mq.root, *mq.root.rglob("*")]:
        os.lchown(p, 12345, 12345)
    for args in (["topic", "list"], ["send", "t", "two"], ["consume", "t", "-g", "G", "-e"], ["store", "check"],
                 ["store", "recover"], ["tx", "list"]):
        res = mq.run(*args)
        msg = one_error(res, res.returncode)
        assert res.returncode != 0
        assert "12345" in msg and "refusing" in msg, msg
    # nothing was written into it
    assert all(os.lstat(p).st_uid == 12345 for p in [mq.root, *mq.root.rglob("*")])
