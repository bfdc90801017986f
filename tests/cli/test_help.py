"""Every command, group, option and argument has help text (clig: help is the documentation
people read first; click-man also fails on a command without help)."""
from __future__ import annotations

from typing import Iterator

import typer
from typer.testing import CliRunner

from mqctl.app import app


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
