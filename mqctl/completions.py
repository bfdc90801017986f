"""Shell completion files, generated from the Typer app.

``python -m mqctl.completions`` writes ``completions/mqctl.bash``, ``completions/_mqctl`` (zsh)
and ``completions/mqctl.fish``; ``python -m mqctl.completions --check`` only compares them with
what would be generated and exits 1 when one is stale (CI and ``tests/test_completions.py``).

Each file is what ``_MQCTL_COMPLETE=source_bash|source_zsh|source_fish mqctl`` prints (Typer's
spelling; Click 8's ``bash_source`` does not work with Typer), run as a subprocess so the
script is exactly the one the installed program produces. The files are thin shims: at tab
time they call ``mqctl`` back with ``_MQCTL_COMPLETE=complete_<shell>``, so the commands,
options and the topic/group names read from the store are always current. Two normalisations:
leading blank lines are removed (zsh autoloads ``_mqctl`` from ``fpath`` only when
``#compdef mqctl`` is its first line) and the file ends with exactly one newline.

``mqctl completion SHELL`` prints the same text, generated in-process (no second process at
the prompt). ``mqctl --install-completion`` is Typer's own and keeps working.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from mqctl.entry import COMPLETE_VAR

PROG = "mqctl"
SHELLS = {"bash": "mqctl.bash", "zsh": "_mqctl", "fish": "mqctl.fish"}
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "completions"


def normalize(text: str) -> str:
    """No leading blank lines, no trailing whitespace, one final newline."""
    return text.lstrip("\r\n").rstrip() + "\n"


def script(shell: str) -> str:
    """The completion script for ``shell``, generated in this process."""
    # typer.completion imports it without re-exporting it (no __all__, no `as`): its typing is wrong
    from typer.completion import get_completion_script  # type: ignore[attr-defined]
    return normalize(get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell))


def generate(shell: str) -> str:
    """The completion script as ``_MQCTL_COMPLETE=source_<shell> mqctl`` prints it."""
    env = {**os.environ, COMPLETE_VAR: f"source_{shell}"}
    env.pop("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    # main() passes prog_name="mqctl" itself, so the interpreter path does not leak in.
    proc = subprocess.run([sys.executable, "-c", "from mqctl.app import main; main()"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"{COMPLETE_VAR}=source_{shell} mqctl failed ({proc.returncode}): {proc.stderr.strip()}")
    return normalize(proc.stdout)


def stale_files(directory: Path = DEFAULT_DIR) -> list[Path]:
    """Files of ``directory`` that differ from a fresh generation (or are missing)."""
    stale = []
    for shell, name in SHELLS.items():
        path = directory / name
        if not path.exists() or path.read_text() != generate(shell):
            stale.append(path)
    return stale


def write_all(directory: Path = DEFAULT_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for shell, name in SHELLS.items():
        path = directory / name
        path.write_text(generate(shell))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mqctl.completions",
                                     description="Generate the shell completion files of mqctl.")
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if a committed file differs from a fresh generation")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="output directory (default: completions/)")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.dir)
        for p in stale:
            sys.stderr.write(f"stale: {p} (regenerate with: python -m mqctl.completions)\n")
        return 1 if stale else 0
    for p in write_all(args.dir):
        sys.stderr.write(f"wrote {p}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
