"""Every command, group, option and argument has help text (clig: help is the documentation
people read first; click-man also fails on a command without help)."""
from __future__ import annotations

import inspect
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import pytest
import typer
from typer.testing import CliRunner

from mqctl.app import app
from tests.procs import MQCTL, mqctl_env, run


def walk(cmd, path: tuple[str, ...] = ("mqctl",)) -> Iterator[tuple[tuple[str, ...], object]]:  # type: ignore[no-untyped-def]
    yield path, cmd
    for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
        yield from walk(sub, path + (name,))


def commands() -> list[tuple[tuple[str, ...], object]]:
    return list(walk(typer.main.get_command(app)))


def test_the_tree_is_walked() -> None:
    names = {" ".join(p) for p, _ in commands()}
    for expected in ("mqctl offsets reset", "mqctl progress", "mqctl locks", "mqctl dlq resend",
                     "mqctl store clean", "mqctl completion"):
        assert expected in names


def test_every_command_has_help() -> None:
    missing = [" ".join(p) for p, c in commands()
               if not getattr(c, "hidden", False) and not (getattr(c, "help", None) or "").strip()]
    assert missing == [], f"commands without help: {missing}"


def test_every_option_and_argument_has_help() -> None:
    missing = []
    for path, cmd in commands():
        for param in getattr(cmd, "params", []):
            if getattr(param, "hidden", False):
                continue
            if not (getattr(param, "help", None) or "").strip():
                missing.append(f"{' '.join(path)} {param.opts[0] if param.opts else param.name}")
    assert missing == [], f"parameters without help: {missing}"


def test_help_renders_for_every_command() -> None:
    runner = CliRunner()
    for path, _cmd in commands():
        r = runner.invoke(app, list(path[1:]) + ["--help"], env={"NO_COLOR": "1"})
        assert r.exit_code == 0, (path, r.output)
        assert "Usage:" in r.stdout


# -- how help reads at 80 columns, piped (plain) and on a terminal (rich) ------------------

COLUMNS = 80
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BOX = "│╭╮╰╯─┃┏┓┗┛━"
# A terminal that allows colour, 80 columns wide (no store: help needs none).
HELP_ENV = mqctl_env(None, extra={"NO_COLOR": None, "CI": None, "TERM": "xterm-256color",
                                  "COLUMNS": str(COLUMNS), "LINES": "50"})


def examples(cmd: object) -> list[str]:
    """The example lines of a command's help, as written in its source."""
    text = inspect.cleandoc(getattr(cmd, "help", None) or "")
    lines: list[str] = []
    for para in text.split("\n\n"):
        head, *rest = para.replace("\b\n", "").split("\n")
        if head.strip().startswith("Example"):
            lines.extend(line.strip() for line in rest if line.strip())
    return lines


def render_piped(args: list[str]) -> str:
    cp = run([*MQCTL, *args, "--help"], env=HELP_ENV)
    assert cp.returncode == 0, str(cp)
    return cp.out


def render_on_terminal(args: list[str]) -> str:
    """``mqctl ARGS --help`` with stdout on a pseudo-terminal 80 columns wide."""
    cp = run([*MQCTL, *args, "--help"], env=HELP_ENV, tty="stdout", tty_size=(50, COLUMNS))
    assert cp.returncode == 0, str(cp)
    return _ANSI.sub("", cp.out).replace("\r\n", "\n")


def _lines(text: str) -> set[str]:
    out = set()
    for line in text.splitlines():
        for ch in _BOX:
            line = line.replace(ch, " ")
        out.add(" ".join(line.split()))
    return out


def _visible_commands() -> list[tuple[list[str], object]]:
    return [(list(p[1:]), c) for p, c in commands() if not getattr(c, "hidden", False)]


@pytest.mark.parametrize("mode", ["piped", "terminal"])
def test_help_at_80_columns_keeps_examples_and_plain_metavars(mode: str) -> None:
    render = render_piped if mode == "piped" else render_on_terminal
    targets = _visible_commands()
    with ThreadPoolExecutor(max_workers=4) as pool:
        pages = list(pool.map(lambda t: render(t[0]), targets))
    problems = []
    for (args, cmd), page in zip(targets, pages):
        name = " ".join(["mqctl", *args])
        shown = _lines(page)
        for example in examples(cmd):
            if " ".join(example.split()) not in shown:
                problems.append(f"{name}: example cut or rewrapped: {example!r}")
        for bad in re.findall(r"\{[A-Za-z_ -]+\}|<(?:str|int|float|text|path|int range|float range)>", page):
            problems.append(f"{name}: metavar {bad!r}")
        if page.splitlines() and max(len(line) for line in page.splitlines()) > COLUMNS:
            problems.append(f"{name}: a line is wider than {COLUMNS} columns")
        if args == [] or hasattr(cmd, "commands"):
            if re.search(r"\w\.\.\.\s*$", page, re.MULTILINE):
                problems.append(f"{name}: a command's help is cut with '...'")
    assert problems == [], "\n".join(problems)


def test_examples_exist_for_the_everyday_commands() -> None:
    have = {" ".join(p[1:]) for p, c in commands() if examples(c)}
    for name in ("send", "consume", "progress", "offsets show", "offsets reset", "msg query",
                 "dlq resend", "tx send", "tx check", "store clean", "query"):
        assert name in have, f"mqctl {name} --help has no examples"


def test_root_help_groups_commands_in_panels() -> None:
    page = render_piped([])
    headings = [line.rstrip(":") for line in page.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headings[:2] == ["Usage", "Options"] or "Options" in headings
    for panel in ("Produce and consume", "Groups and offsets", "Transactions", "Store and topics",
                  "Spark", "Benchmarks"):
        assert panel in headings, (panel, headings)
    rich = render_on_terminal([])
    for panel in ("Produce and consume", "Groups and offsets", "Transactions"):
        assert f"╭─ {panel} " in rich


def test_no_color_gives_plain_help_even_on_a_terminal() -> None:
    data = run([*MQCTL, "--help"], env={**HELP_ENV, "NO_COLOR": "1"}, tty="stdout").stdout
    assert b"\x1b[" not in data and "╭".encode() not in data
    assert b"Produce and consume:" in data


def test_force_color_gives_rich_help_in_a_pipe() -> None:
    data = run([*MQCTL, "--help"], env={**HELP_ENV, "FORCE_COLOR": "1"}).stdout
    assert b"\x1b[" in data and "╭─ Produce and consume " in _ANSI.sub("", data.decode())
    plain = run([*MQCTL, "--help"], env={**HELP_ENV, "FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout
    assert b"\x1b[" not in plain and b"Produce and consume:" in plain


def _groups() -> list[tuple[str, ...]]:
    return [p for p, c in commands() if getattr(c, "commands", None) and not getattr(c, "hidden", False)]


def test_every_group_without_a_command_prints_its_help_and_one_error_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 24 D7: ``mqctl store`` printed the help and exited 2 with no ``mqctl: error:``
    line. Every command group (the root too) prints its help on stderr, nothing on stdout,
    then one error line naming what is missing, and exits 2."""
    from tests.procs import mqctl
    groups = _groups()
    assert ("mqctl", "store") in groups and ("mqctl", "tx") in groups and ("mqctl",) in groups
    for path in groups:
        res = mqctl(tmp_path / "store", *path[1:])
        assert res.returncode == 2, str(res)
        assert res.stdout == b"", str(res)
        assert f"Usage: {' '.join(path)} " in res.stderr, str(res)
        lines = [ln for ln in res.stderr.split("\n") if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("mqctl: error: ")]
        assert errors == [lines[-1]], str(res)
        assert errors[0].startswith(f"mqctl: error: missing command after '{' '.join(path)}'"), errors[0]
        assert "Traceback" not in res.stderr
