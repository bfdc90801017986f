"""The documentation's runnable examples run.

Every fenced ``sh`` block in README.md and docs/*.md that is preceded by a ``<!-- test -->``
line (blank lines between are allowed) is run with bash (``set -euo pipefail``) in a scratch
directory, against a fresh store (``MQCTL_STORE``), with the project's ``mqctl`` first on
PATH, and must exit 0 within the time limit. Examples stay fast by using ``--exit-at-end``,
``--count`` or ``--idle-timeout``.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.procs import MQ

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- test -->"
FENCE = re.compile(r"^```(\w*)\s*$")
TIMEOUT = 120


def doc_files() -> list[Path]:
    files = [ROOT / "README.md"] if (ROOT / "README.md").exists() else []
    return files + sorted((ROOT / "docs").glob("*.md"))


def runnable_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, code) of each ```sh block marked runnable."""
    lines = text.splitlines()
    out = []
    marked = False
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:
            j = i + 1
            while j < len(lines) and not FENCE.match(lines[j]):
                j += 1
            if marked and fence.group(1) in ("sh", "bash", "shell"):
                out.append((i + 1, "\n".join(lines[i + 1:j]) + "\n"))
            marked = False
            i = j + 1
            continue
        if line.strip() == MARK:
            marked = True
        elif line.strip():
            marked = False
        i += 1
    return out


def examples() -> list:  # type: ignore[type-arg]
    params = []
    for path in doc_files():
        for lineno, code in runnable_blocks(path.read_text()):
            params.append(pytest.param(path, lineno, code, id=f"{path.relative_to(ROOT)}:{lineno}"))
    return params


def test_the_extractor() -> None:
    text = "\n".join([
        "<!-- test -->", "```sh", "echo one", "```",
        "```sh", "echo not marked", "```",
        "<!-- test -->", "", "```bash", "echo two", "```",
        "<!-- test -->", "prose in between", "```sh", "echo not either", "```",
        "<!-- test -->", "```python", "print('no')", "```",
    ])
    assert [code for _, code in runnable_blocks(text)] == ["echo one\n", "echo two\n"]


def test_the_readme_has_runnable_examples_for_each_job() -> None:
    text = (ROOT / "README.md").read_text()
    for job in ("Pipelines with `send` and `consume`", "Ordered processing with several processes",
                "Transactions from a shell script", "Inspecting a stuck group"):
        assert f"### {job}" in text, job
    assert len(runnable_blocks(text)) >= 4


@pytest.mark.parametrize(("path", "lineno", "code"), examples())
def test_example_runs(path: Path, lineno: int, code: str, tmp_path: Path) -> None:
    assert shutil.which("bash") is not None
    work = tmp_path / "work"
    work.mkdir()
    # A fresh store the example creates itself (not the ``mq`` fixture's, made by ``mqctl init``).
    mq = MQ(tmp_path / "store", tmp_path, cwd=work)
    cp = mq.shell("set -euo pipefail\n" + code, timeout=TIMEOUT)
    assert cp.returncode == 0, (f"{path.name}:{lineno}: exit {cp.returncode}\n--- stdout\n{cp.out[-3000:]}"
                                f"\n--- stderr\n{cp.stderr[-3000:]}")


def test_the_exactly_once_example_ships_in_order(tmp_path: Path) -> None:
    """The exactly-once example says its stages keep the order ("order-1 shipped …
    order-6 shipped, in order"): its output is checked, not only its exit code (the copy
    stage was not --orderly and spread the orders over eight queues)."""
    [code] = [code for _, code in runnable_blocks((ROOT / "README.md").read_text()) if "--to shipped" in code]
    work = tmp_path / "work"
    work.mkdir()
    cp = MQ(tmp_path / "store", tmp_path, cwd=work).shell("set -euo pipefail\n" + code, timeout=TIMEOUT)
    assert cp.returncode == 0, cp.stderr[-3000:]
    shipped = [line for line in cp.out.splitlines() if re.fullmatch(r"order-\d+ shipped", line)]
    assert shipped == [f"order-{i} shipped" for i in range(1, 7)], cp.out


def _run_block(tmp_path: Path, marker: str) -> str:
    [code] = [code for _, code in runnable_blocks((ROOT / "README.md").read_text()) if marker in code]
    tmp_path.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    cp = MQ(tmp_path / "store", tmp_path, cwd=work).shell("set -euo pipefail\n" + code, timeout=TIMEOUT)
    assert cp.returncode == 0, cp.stderr[-3000:]
    return cp.out


@pytest.mark.parametrize("run", range(3))
def test_the_exec_example_writes_whole_lines(tmp_path: Path, run: int) -> None:
    """The ``--exec`` example says ``sort upper.txt`` prints ALPHA BETA GAMMA. Its handler
    appended a body and then its newline in two writes while up to four handlers ran at once,
    so lines came out interleaved (``ALPHAGAMMA``) in most runs; each handler writes one line
    in one write now. (Three runs: one interleaving is not certain in one.)"""
    out = _run_block(tmp_path / str(run), "upper.txt")
    assert out.split() == ["ALPHA", "BETA", "GAMMA"], out


@pytest.mark.parametrize("run", range(2))
@pytest.mark.slow
def test_the_orderly_example_logs_each_account_in_order(tmp_path: Path, run: int) -> None:
    """The orderly example says ``grep alice posted.log`` shows alice's three steps in order:
    its handlers (two workers, several queues each) had the same two-write race."""
    out = _run_block(tmp_path / str(run), "posted.log")
    alice = [line for line in out.splitlines() if "alice" in line]
    assert alice == ["alice step 1", "alice step 2", "alice step 3"], out
