"""The README's exit-code table, row by row, through real processes: each row's example is
run on a store with a topic ``orders`` and must exit with the row's code and start stderr
with the row's text (one line). A row added to the README without a scenario here fails."""
from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from tests.procs import MQ, Result, mqctl, wait_for

ROOT = Path(__file__).resolve().parents[2]


def readme_rows() -> list[tuple[int, str, str]]:
    """(code, example, stderr prefix) of every row of the table under "Exit codes"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### Exit codes and errors", 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[0].isdigit():
            example = cells[2].replace("\\|", "|")
            want = cells[3].strip("`") if cells[3] != "nothing" else ""
            rows.append((int(cells[0]), example, want))
    return rows


@pytest.fixture(scope="module")
def mq_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every row runs on a copy of this store: a topic ``orders``."""
    root = tmp_path_factory.mktemp("exit-codes") / "store"
    mqctl(root, "topic", "create", "orders", check=True)
    return root


@pytest.fixture
def e(mq: MQ) -> MQ:
    """``mq`` as a user's shell runs it: NO_COLOR unset."""
    mq.extra_env["NO_COLOR"] = None
    return mq


def _damaged(e: MQ) -> Result:
    e.run("send", "orders", "-", input=b"".join(b"message %d\n" % i for i in range(50)))
    segment = sorted((e.root / "commitlog").iterdir())[0]
    with open(segment, "r+b") as f:       # flip a few bytes inside an early record's body
        f.seek(300)
        data = f.read(4)
        f.seek(300)
        f.write(bytes(b ^ 0xFF for b in data))
    return e.run("store", "check")


def _damaged_key_lookup(e: MQ) -> Result:
    e.run("send", "orders", "-k", "order-1", "-", input=b"".join(b"keyed %d\n" % i for i in range(5)))
    segment = sorted((e.root / "commitlog").iterdir())[0]
    with open(segment, "r+b") as f:       # inside the second record
        f.seek(250)
        data = f.read(2)
        f.seek(250)
        f.write(bytes(b ^ 0xFF for b in data))
    return e.run("msg", "query", "--topic", "orders", "-k", "order-1")


def _resolved_other_way(e: MQ) -> tuple[Result, str]:
    sent = e.run("tx", "send", "orders", "body")
    tx = json.loads(sent.stdout)["txId"]
    assert e.run("tx", "commit", tx).returncode == 0
    return e.run("tx", "rollback", tx), tx


def _blocked_on_a_pipe(pid: int) -> bool:
    try:
        return "pipe" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def _interrupted(e: MQ, sig: int = signal.SIGINT) -> Result:
    proc = e.start("send", "orders", stdin=subprocess.PIPE)
    # The signal once the process is blocked reading stdin: its handlers are installed by then.
    try:
        wait_for(lambda: _blocked_on_a_pipe(proc.pid), 60.0, interval=0.02, what="send to read stdin")
    except AssertionError:
        pass   # a kernel that does not show wchan: a minute is long past the handlers' set-up
    proc.signal(sig)
    return Result(proc.args, proc.wait(60), proc.stdout(), proc.stderr())


def _shell(e: MQ, line: str) -> Result:
    """``line`` as a user's bash runs it; a pipeline fails with its first failing command."""
    return e.shell(f"set -o pipefail; {line}", timeout=120)


def _closed_early(e: MQ) -> Result:
    # more than a pipe buffer of output, so the reader is gone while consume still writes
    e.run("send", "orders", input=b"".join(b"message number %06d\n" % i for i in range(20_000)))
    return _shell(e, "mqctl consume orders -g g --from first -e | head -1")


SCENARIOS: dict[str, Callable[[MQ], Result]] = {
    "mqctl store check": _damaged,
    "mqctl msg query --topic orders -k order-1": _damaged_key_lookup,
    "mqctl tx rollback TXID": lambda e: _resolved_other_way(e)[0],
    "mqctl send orders": lambda e: e.run("send", "orders", input=b"x" * 5_000_000 + b"\n", timeout=120),
    "mqctl send orders -": lambda e: _interrupted(e, signal.SIGTERM),
    "": _interrupted,
}


def _scenario(example: str) -> tuple[str, Callable[[MQ], Result] | None]:
    commands = re.findall(r"`([^`]*)`", example)
    if not commands:
        return "", SCENARIOS[""]
    first = commands[0]
    if first in SCENARIOS:
        return first, SCENARIOS[first]
    if first == "mqctl consume orders -g g --from first -e | head -1":
        return first, _closed_early
    if "mqctl " in first:
        return first, lambda e: _shell(e, first)
    return first, None


@pytest.mark.parametrize("code,example,want", readme_rows(), ids=[f"{r[0]}:{r[1][:40]}" for r in readme_rows()])
def test_readme_exit_code_row(code: int, example: str, want: str, e: MQ) -> None:
    key, scenario = _scenario(example)
    assert scenario is not None, f"no scenario for README row {example!r}"
    if key == "mqctl tx rollback TXID":
        cp, tx = _resolved_other_way(e)
        want = want.replace("TXID", tx)
    else:
        cp = scenario(e)
    err = cp.stderr
    assert cp.returncode == code, (example, cp.returncode, err)
    errors = [line for line in err.splitlines() if line.startswith("mqctl: error:")]
    if want.startswith("mqctl: error:"):
        assert len(errors) == 1 and errors[0].startswith(want), (example, err)
    elif want:
        assert any(line.startswith(want) for line in err.splitlines()), (example, err)
    else:
        assert errors == [], (example, err)


def test_the_table_covers_every_code() -> None:
    assert {r[0] for r in readme_rows()} >= {0, 1, 2, 3, 4, 5, 130, 141, 143}


def test_an_unreadable_store_names_the_file_it_could_not_open(e: MQ) -> None:
    """An I/O error that names its file says which (a store without access, a lost file),
    not only that the operation failed."""
    import os
    import shutil
    e.root.chmod(0)
    try:
        argv = e.argv("topic", "list")
        if os.geteuid() == 0:   # root reads anything: drop the capabilities that let it
            if shutil.which("capsh") is None:
                pytest.skip("running as root without capsh")
            argv = ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--", "-c",
                    " ".join(f"'{a}'" for a in argv)]
        r = subprocess.run(argv, capture_output=True, text=True, env=e.environ(), timeout=120)
    finally:
        e.root.chmod(0o700)
    assert r.returncode == 1, r.stderr
    assert r.stderr == f"mqctl: error: cannot access {e.root}/store.json: permission denied\n"
