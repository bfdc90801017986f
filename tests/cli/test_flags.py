"""One meaning per short flag across every command, as the table in ``mqctl/options.py``
(and the README) writes it, and ``--store``/``--utc``/``--json`` accepted anywhere."""
from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest
import typer

import mqctl.options
from mqctl.app import app
from mqctl.argv import normalize
from tests.procs import MQCTL, Result, mqctl_env, run


def on_the_line(*args: str) -> Result:
    """``mqctl ARGS`` with no store in the environment: only the command line names one."""
    return run([*MQCTL, *args], args=args, env=mqctl_env(None))


def documented() -> dict[str, set[str]]:
    """short flag -> the long names the options.py table gives it."""
    table: dict[str, set[str]] = {}
    for line in (mqctl.options.__doc__ or "").splitlines():
        m = re.match(r"(-[A-Za-z])\s{2,}(--[a-z-]+(?: / --[a-z-]+)*)\s{2,}\S", line)
        if m:
            table[m.group(1)] = set(m.group(2).split(" / "))
    return table


def used() -> dict[str, dict[str, list[str]]]:
    """short flag -> long name -> the commands that give it that meaning."""
    found: dict[str, dict[str, list[str]]] = collections.defaultdict(lambda: collections.defaultdict(list))

    def walk(cmd: object, path: str) -> None:
        for p in getattr(cmd, "params", []):
            longs = [o for o in p.opts if o.startswith("--")]
            for short in (o for o in p.opts + p.secondary_opts if re.fullmatch(r"-[A-Za-z]", o)):
                found[short][longs[0] if longs else "?"].append(path)
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return found


def test_the_table_is_read() -> None:
    table = documented()
    assert table["-g"] == {"--group"} and table["-t"] == {"--tag"} and len(table) > 15


def test_every_short_flag_has_one_documented_meaning() -> None:
    table = documented()
    problems = []
    for short, meanings in sorted(used().items()):
        if short not in table:
            problems.append(f"{short} is not in the table: {dict(meanings)}")
            continue
        for long, where in meanings.items():
            if long not in table[short]:
                problems.append(f"{short} means {long} in {where}, the table says {table[short]}")
    assert problems == [], "\n".join(problems)


def test_topic_has_no_short_flag() -> None:
    for short, meanings in used().items():
        assert "--topic" not in meanings, f"{short} is --topic in {meanings['--topic']}"


# The command lines that used to work with a short flag that meant something else there.
REMOVED = [
    ("-t as --topic", ["progress", "-g", "g", "-t", "orders"]),
    ("-t as --topic", ["offsets", "show", "-g", "g", "-t", "orders"]),
    ("-n as --queues", ["topic", "create", "orders", "-n", "2"]),
    ("-n as --count", ["consume", "orders", "-g", "g", "-n", "1"]),
    ("-c as --consumers", ["rebalance", "orders", "-g", "g", "-c", "a,b"]),
    ("-c as --check-cmd", ["tx", "check", "-c", "true"]),
    ("-m as --limit", ["msg", "query", "--topic", "orders", "-k", "k", "-m", "5"]),
    ("-J as --json", ["topic", "list", "-J"]),
]


@pytest.mark.parametrize("line", [r[1] for r in REMOVED], ids=[r[0] for r in REMOVED])
def test_a_removed_short_flag_is_a_usage_error(line: list[str], tmp_path: Path) -> None:
    cp = on_the_line("--store", str(tmp_path / "s"), *line)
    assert cp.returncode == 2, str(cp)
    flag = next(a for a in line if re.fullmatch(r"-[A-Za-z]", a) and a not in ("-g", "-k"))
    assert cp.stderr.startswith(f"mqctl: error: No such option: {flag}"), cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1


# -- global options anywhere ----------------------------------------------------------------

def test_normalize_moves_store_and_utc_to_the_front() -> None:
    root = typer.main.get_command(app)
    assert normalize(["send", "t", "x", "--store", "S"], root) == ["--store", "S", "send", "t", "x"]
    assert normalize(["send", "t", "--store=S", "x"], root) == ["--store=S", "send", "t", "x"]
    assert normalize(["msg", "show", "ID", "--utc"], root) == ["--utc", "msg", "show", "ID"]


def test_normalize_moves_json_after_the_command() -> None:
    root = typer.main.get_command(app)
    assert normalize(["--json", "topic", "list"], root) == ["topic", "list", "--json"]
    assert normalize(["topic", "-j", "list"], root) == ["topic", "list", "-j"]


def test_normalize_leaves_values_and_the_rest_alone() -> None:
    root = typer.main.get_command(app)
    # an option's value is never taken for a global option
    assert normalize(["send", "t", "--tag", "--store"], root) == ["send", "t", "--tag", "--store"]
    assert normalize(["send", "t", "--", "--store", "S"], root) == ["send", "t", "--", "--store", "S"]
    assert normalize(["nosuch", "--json"], root) == ["nosuch", "--json"]


def test_store_and_json_anywhere_in_real_processes(tmp_path: Path) -> None:
    store = str(tmp_path / "s")

    cp = on_the_line("send", "orders", "hello", "--store", store)
    assert cp.returncode == 0, cp.stderr
    cp = on_the_line("--json", "topic", "list", "--store", store)
    assert cp.returncode == 0, cp.stderr
    assert '"topic":"orders"' in cp.out
    cp = on_the_line("topic", "--json", "list", f"--store={store}")
    assert cp.returncode == 0 and '"topic":"orders"' in cp.out, str(cp)
    cp = on_the_line("topic", "list", "--store")
    assert cp.returncode == 2 and cp.stderr.startswith("mqctl: error: Option '--store' requires an argument"), str(cp)
    cp = on_the_line("topic", "list", "--utc=1", "--store", store)
    assert cp.returncode == 2 and "--utc" in cp.stderr and "does not take a value" in cp.stderr, str(cp)
    cp = on_the_line("--json", "init", "--store", store)
    assert cp.returncode == 2 and cp.stderr.startswith("mqctl: error: No such option: --json"), str(cp)


@pytest.mark.parametrize("args", [["--store=", "consume", "orders", "-g", "g", "-e"], ["--store=", "send", "t", "x"],
                                  ["--store", "", "topic", "list"], ["topic", "list", "--store", " "]])
def test_an_empty_store_flag_is_refused_not_taken_for_the_default_store(tmp_path: Path, args: list[str]) -> None:
    """``--store "$DIR"`` with DIR unset must not work on ~/.mqctl/store (or $MQCTL_STORE)."""
    default = tmp_path / "default"
    cp = run([*MQCTL, *args], args=args, env=mqctl_env(default))
    assert cp.returncode == 2 and cp.stderr.startswith("mqctl: error: --store needs a directory"), str(cp)
    assert not default.exists()


def test_a_bad_number_names_the_kind_of_value_not_the_click_type(tmp_path: Path) -> None:
    cp = on_the_line("--store", str(tmp_path / "s"), "consume", "t", "-g", "g", "-c", "abc")
    assert cp.returncode == 2
    assert cp.stderr == ("mqctl: error: Invalid value for '--count' / '-c': 'abc' is not a whole number. "
                         "(see 'mqctl consume --help')\n")
