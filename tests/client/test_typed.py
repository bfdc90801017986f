"""The library is typed for its users (PEP 561): a program that imports ``store`` gets its
annotations checked by mypy, not ``Any`` with a "missing library stubs or py.typed" error."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_a_users_mypy_reads_the_librarys_types(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    program = tmp_path / "user.py"
    program.write_text("import store\n"
                       "r = store.Producer().send('t', b'x')\n"
                       "n: int = r.msg_id\n")   # a str: wrong on purpose, so mypy must know it
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--strict", str(program)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "py.typed" not in r.stdout, r.stdout
    assert 'Incompatible types in assignment (expression has type "str", variable has type "int")' \
        in r.stdout, r.stdout
