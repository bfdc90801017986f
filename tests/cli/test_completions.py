"""The committed completion files are what the app generates, and each shell accepts its file.

Regenerate with ``python -m mqctl.completions``. zsh and fish are checked only where they are
installed (skipped otherwise, never passed without running)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mqctl.completions import DEFAULT_DIR, SHELLS, generate, main, script
from tests.procs import MQ, mqctl, run

FILES = {shell: DEFAULT_DIR / name for shell, name in SHELLS.items()}


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_committed_file_is_current(shell: str) -> None:
    path = FILES[shell]
    assert path.exists(), f"{path} is missing: run python -m mqctl.completions"
    assert path.read_text() == generate(shell), f"{path} is stale: run python -m mqctl.completions"


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_in_process_script_matches_the_subprocess_one(shell: str) -> None:
    assert script(shell) == generate(shell)


def test_check_mode(tmp_path: Path) -> None:
    assert main(["--check"]) == 0
    assert main(["--dir", str(tmp_path)]) == 0
    assert main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "_mqctl").write_text("#compdef mqctl\n# edited by hand\n")
    assert main(["--check", "--dir", str(tmp_path)]) == 1


def test_shapes() -> None:
    zsh = FILES["zsh"].read_text()
    assert zsh.splitlines()[0] == "#compdef mqctl", "zsh autoloads only with #compdef on line 1"
    for path in FILES.values():
        text = path.read_text()
        assert text.endswith("\n") and not text.endswith("\n\n") and not text.startswith("\n")
        assert "_MQCTL_COMPLETE=complete_" in text


def _syntax(shell: str) -> None:
    exe = shutil.which(shell)
    if exe is None:
        pytest.skip(f"{shell} is not installed")
    cp = run([exe, "-n", str(FILES[shell])], env=os.environ, timeout=30)
    assert cp.returncode == 0, cp.stderr


def test_bash_syntax() -> None:
    _syntax("bash")


def test_zsh_syntax() -> None:
    _syntax("zsh")


def test_fish_syntax() -> None:
    _syntax("fish")


def test_bash_completes_commands_and_store_names(mq: MQ) -> None:
    """At tab time the shim calls mqctl back: sub-commands and topic names come back."""
    mq.ok("topic", "create", "orders", "--queues", "2")

    def complete(words: str, cword: int) -> list[str]:
        return mq.run(extra_env={"COMP_WORDS": words, "COMP_CWORD": str(cword),
                                 "_MQCTL_COMPLETE": "complete_bash"}).out.split()

    assert "offsets" in complete("mqctl off", 1)
    assert "orders" in complete("mqctl rebalance or", 2)


def _bash_complete(mq: MQ, line: list[str]) -> list[str]:
    """Complete the last word of ``line`` the way an interactive bash does: the committed
    script sourced into a real bash, COMP_WORDS/COMP_CWORD set, its function called."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    words = " ".join(f"'{w}'" for w in line)
    program = (f"source {FILES['bash']}\n"
               f"COMP_WORDS=({words}); COMP_CWORD={len(line) - 1}\n"
               "_mqctl_completion mqctl\n"
               'printf "%s\\n" "${COMPREPLY[@]}"\n')
    cp = mq.shell(program)
    assert cp.returncode == 0, cp.stderr
    return [w for w in cp.out.splitlines() if w]


def test_real_bash_completes_choices_and_topic_names(mq: MQ, tmp_path: Path) -> None:
    for topic in ("orders", "order-audit", "payments"):
        mq.ok("topic", "create", topic)
    assert set(_bash_complete(mq, ["mqctl", "consume", "orders", "--strategy", ""])) == {
        "averagely", "circle", "hash", "config"}
    assert set(_bash_complete(mq, ["mqctl", "send", "orders", "--flush", ""])) == {"async", "sync"}
    assert set(_bash_complete(mq, ["mqctl", "send", "ord"])) == {"orders", "order-audit"}
    assert set(_bash_complete(mq, ["mqctl", "consume", "p"])) == {"payments"}
    # --store given on the line wins over $MQCTL_STORE for completion too
    other = tmp_path / "other"
    mqctl(other, "topic", "create", "elsewhere", check=True)
    assert _bash_complete(mq, ["mqctl", "--store", str(other), "send", "e"]) == ["elsewhere"]
    # ... and after the command, as everywhere else on the line
    assert _bash_complete(mq, ["mqctl", "send", "--store", str(other), "e"]) == ["elsewhere"]
    assert _bash_complete(mq, ["mqctl", "send", f"--store={other}", "e"]) == ["elsewhere"]
    assert _bash_complete(mq, ["mqctl", "send", "--store", str(other), "p"]) == []
    # a filled argument after a --store that follows the command is not offered again
    mqctl(other, "topic", "create", "zeta", check=True)
    assert _bash_complete(mq, ["mqctl", "topic", "status", "--store", str(other), "zeta", ""]) == []
    assert _bash_complete(mq, ["mqctl", "topic", "status", "--store", str(other), "z"]) == ["zeta"]


def test_install_completion_option_is_still_there() -> None:
    from typer.testing import CliRunner

    from mqctl.app import app
    r = CliRunner().invoke(app, ["--help"])
    assert "--install-completion" in r.stdout and "--show-completion" in r.stdout


def test_install_completion_still_works(tmp_path: Path) -> None:
    """Typer's own --install-completion writes the same script (into a scratch HOME here)."""
    cp = mqctl(tmp_path / "store", "--install-completion", "bash",
               extra_env={"HOME": str(tmp_path), "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert cp.returncode == 0, cp.stderr
    installed = tmp_path / ".bash_completions" / "mqctl.sh"
    assert installed.read_text().rstrip() + "\n" == FILES["bash"].read_text()


def test_real_bash_escapes_names_and_completes_after_an_equals_sign(mq: MQ, tmp_path: Path) -> None:
    """A topic or group name may hold ``|`` (and ``%``): bash inserts a completion as it is,
    so it comes escaped (``printf %q``), and an escaped prefix typed still matches. Bash
    splits ``--strategy=`` at the ``=`` (COMP_WORDBREAKS): the value after it completes as
    after a space, and so does ``--store=DIR`` before a topic."""
    mq.ok("topic", "create", "a%b|c-d_e")
    mq.ok("topic", "create", "orders")
    assert _bash_complete(mq, ["mqctl", "send", "a"]) == ["a%b\\|c-d_e"]
    assert _bash_complete(mq, ["mqctl", "send", "a%b\\|"]) == ["a%b\\|c-d_e"]
    assert set(_bash_complete(mq, ["mqctl", "consume", "orders", "--strategy", "="])) == {
        "averagely", "circle", "hash", "config"}
    assert _bash_complete(mq, ["mqctl", "consume", "orders", "--strategy", "=", "ci"]) == ["circle"]
    other = tmp_path / "other"
    mqctl(other, "topic", "create", "elsewhere", check=True)
    assert _bash_complete(mq, ["mqctl", "send", "--store", "=", str(other), "e"]) == ["elsewhere"]
    assert _bash_complete(mq, ["mqctl", "consume", "orders", "-g", "a"]) == []
