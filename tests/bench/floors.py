"""The C floors the benchmarks compile on first use (``pipe_floor.c``, ``fsync_floor.c``,
``wake_floor.c``, ``consume_floor.c``): built with the machine's ``cc`` into a run's scratch directory, nothing kept."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent


def compile_floor(name: str, workdir: Path, say: Callable[[str], None], libs: tuple[str, ...] = ()) -> Path | None:
    """``tests/bench/<name>.c`` compiled into ``workdir`` (None, said through ``say``: no
    compiler, or it did not build, and that floor is not measured)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        say(f"no C compiler: {name}.c is not built and its floor is skipped")
        return None
    exe = workdir / name
    p = subprocess.run([cc, "-O2", "-o", str(exe), str(HERE / f"{name}.c"), *libs], capture_output=True, text=True)
    if p.returncode != 0:
        say(f"{name}.c did not build, its floor is skipped: {p.stderr.strip()[-300:]}")
        return None
    return exe
