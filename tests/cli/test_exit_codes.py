"""The README's exit-code table, row by row, through real processes: each row's example is
run on a store with a topic ``orders`` and must exit with the row's code and start stderr
with the row's text (one line). A row added to the README without a scenario here fails."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
MQCTL = str(Path(sys.executable).parent / "mqctl")
Run = subprocess.CompletedProcess


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


class Env:
    def __init__(self, tmp: Path) -> None:
        self.store = tmp / "store"
        self.env = {**os.environ, "MQCTL_STORE": str(self.store)}
        self.env.pop("NO_COLOR", None)

    def run(self, *args: str, input: bytes | None = None) -> Run:
        return subprocess.run([MQCTL, *args], env=self.env, input=input, capture_output=True, timeout=120,
                              stdin=None if input is not None else subprocess.DEVNULL)

    def shell(self, line: str) -> Run:
        line = line.replace("mqctl ", f"{MQCTL} ")
        return subprocess.run(["bash", "-c", f"set -o pipefail; {line}"], env=self.env, capture_output=True,
                              timeout=120, stdin=subprocess.DEVNULL)


def _damaged(e: Env) -> Run:
    e.run("send", "orders", "-", input=b"".join(b"message %d\n" % i for i in range(50)))
    segment = sorted((e.store / "commitlog").iterdir())[0]
    with open(segment, "r+b") as f:       # flip a few bytes inside an early record's body
        f.seek(300)
        data = f.read(4)
        f.seek(300)
        f.write(bytes(b ^ 0xFF for b in data))
    return e.run("store", "check")


def _damaged_key_lookup(e: Env) -> Run:
    e.run("send", "orders", "-k", "order-1", "-", input=b"".join(b"keyed %d\n" % i for i in range(5)))
    segment = sorted((e.store / "commitlog").iterdir())[0]
    with open(segment, "r+b") as f:       # inside the second record
        f.seek(250)
        data = f.read(2)
        f.seek(250)
        f.write(bytes(b ^ 0xFF for b in data))
    return e.run("msg", "query", "--topic", "orders", "-k", "order-1")


def _resolved_other_way(e: Env) -> tuple[Run, str]:
    sent = e.run("tx", "send", "orders", "body")
    tx = json.loads(sent.stdout)["txId"]
    assert e.run("tx", "commit", tx).returncode == 0
    return e.run("tx", "rollback", tx), tx


def _interrupted(e: Env) -> Run:
    proc = subprocess.Popen([MQCTL, "send", "orders"], env=e.env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # SIGINT once the process is blocked reading stdin: its handlers are installed by then.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if "pipe" in Path(f"/proc/{proc.pid}/wchan").read_text():
                break
        except OSError:
            pass
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _closed_early(e: Env) -> Run:
    # more than a pipe buffer of output, so the reader is gone while consume still writes
    e.run("send", "orders", input=b"".join(b"message number %06d\n" % i for i in range(20_000)))
    return e.shell("mqctl consume orders -g g --from first -e | head -1")


SCENARIOS: dict[str, Callable[[Env], Run]] = {
    "mqctl store check": _damaged,
    "mqctl msg query --topic orders -k order-1": _damaged_key_lookup,
    "mqctl tx rollback TXID": lambda e: _resolved_other_way(e)[0],
    "mqctl send orders": lambda e: e.run("send", "orders", input=b"x" * 5_000_000 + b"\n"),
    "": _interrupted,
}


def _scenario(example: str) -> tuple[str, Callable[[Env], Run] | None]:
    commands = re.findall(r"`([^`]*)`", example)
    if not commands:
        return "", SCENARIOS[""]
    first = commands[0]
    if first in SCENARIOS:
        return first, SCENARIOS[first]
    if first == "mqctl consume orders -g g --from first -e | head -1":
        return first, _closed_early
    if "mqctl " in first:
        return first, lambda e: e.shell(first)
    return first, None


@pytest.mark.parametrize("code,example,want", readme_rows(), ids=[f"{r[0]}:{r[1][:40]}" for r in readme_rows()])
def test_readme_exit_code_row(code: int, example: str, want: str, tmp_path: Path) -> None:
    e = Env(tmp_path)
    assert e.run("topic", "create", "orders").returncode == 0
    key, scenario = _scenario(example)
    assert scenario is not None, f"no scenario for README row {example!r}"
    if key == "mqctl tx rollback TXID":
        cp, tx = _resolved_other_way(e)
        want = want.replace("TXID", tx)
    else:
        cp = scenario(e)
    err = cp.stderr.decode() if isinstance(cp.stderr, bytes) else cp.stderr
    assert cp.returncode == code, (example, cp.returncode, err)
    errors = [line for line in err.splitlines() if line.startswith("mqctl: error:")]
    if want.startswith("mqctl: error:"):
        assert len(errors) == 1 and errors[0].startswith(want), (example, err)
    elif want:
        assert any(line.startswith(want) for line in err.splitlines()), (example, err)
    else:
        assert errors == [], (example, err)


def test_the_table_covers_every_code() -> None:
    assert {r[0] for r in readme_rows()} >= {0, 1, 2, 3, 4, 5, 130, 141}
