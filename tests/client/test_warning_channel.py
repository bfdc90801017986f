"""The library's one warning channel (store/errors.py): a program that set up logging gets every
warning, a store handle's and a consumer's alike, as a record of the ``store`` logger; one that
set up none gets the ``mqctl: warning:`` lines the command line writes. Real programs, as a
user's: pytest sets up logging in its own process."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# A consumer whose handler fails (its runtime warns: the message goes to the retry topic), then
# an admin over a damaged offset table (its store handle warns).
PROGRAM = textwrap.dedent("""
    import logging, sys
    import store
    root, setup = sys.argv[1], sys.argv[2]
    if setup == "basicConfig":
        logging.basicConfig(format="%(name)s|%(levelname)s|%(message)s")
    elif setup == "NullHandler":
        logging.getLogger("store").addHandler(logging.NullHandler())
    with store.Producer(root) as p:
        p.send("T", b"x")

    def fail(msg):
        raise RuntimeError("no")
    with store.Consumer("T", "G", root, start_from="first") as c:
        c.run(fail, exit_at_end=True)
    with open(root + "/config/consumerOffset.json", "w") as f:
        f.write("not json")
    with store.Admin(root) as admin:
        admin.offsets("G")
    print("done")
""")
RUNTIME = "RuntimeError: no; will be redelivered through %RETRY%G"
HANDLE = "consumerOffset.json is damaged"


def run(root: Path, setup: str) -> list[str]:
    cp = subprocess.run([sys.executable, "-c", PROGRAM, str(root), setup], capture_output=True, text=True,
                        timeout=120)
    assert cp.returncode == 0 and cp.stdout == "done\n", cp.stderr
    return cp.stderr.splitlines()


def test_a_program_without_logging_gets_the_command_lines_warning_lines(tmp_path: Path) -> None:
    """(Before: the consumer's warnings came through logging's last resort, bare lines, and the
    store handle's as ``mqctl: warning:`` lines.)"""
    lines = run(tmp_path / "s", "none")
    assert any(ln.startswith("mqctl: warning: ") and RUNTIME in ln for ln in lines), lines
    assert any(ln.startswith("mqctl: warning: ") and HANDLE in ln for ln in lines), lines
    assert all(ln.startswith("mqctl: warning: ") for ln in lines), lines


@pytest.mark.parametrize("setup", ["basicConfig", "NullHandler"])
def test_a_program_that_set_up_logging_gets_every_warning_there(tmp_path: Path, setup: str) -> None:
    """(Before: the store handle's warnings were ``mqctl: warning:`` lines on stderr whatever
    logging said, and the consumer's were records of ``store.client``.)"""
    lines = run(tmp_path / "s", setup)
    if setup == "NullHandler":
        assert lines == []
        return
    assert any(ln.startswith("store|WARNING|") and RUNTIME in ln for ln in lines), lines
    assert any(ln.startswith("store|WARNING|") and HANDLE in ln for ln in lines), lines
    assert all(ln.startswith("store|WARNING|") for ln in lines), lines
