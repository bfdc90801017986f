"""``mqctl completion``: the shell glue (the scripts: ``mqctl/completions.py``)."""
from __future__ import annotations

from typing import Annotated, Literal

import typer


def register(app: typer.Typer) -> None:
    app.command("completion", help=COMPLETION_HELP)(completion)


COMPLETION_HELP = """Print the shell completion script for bash, zsh or fish.

Install it once, then open a new shell:
  mqctl completion bash > ~/.local/share/bash-completion/completions/mqctl
  mqctl completion zsh > "${fpath[1]}/_mqctl"
  mqctl completion fish > ~/.config/fish/completions/mqctl.fish

Or load it into the current shell only: source <(mqctl completion bash). The same scripts
ship in completions/ (regenerate with: python -m mqctl.completions). Topic and group names
are completed from the store (--store or $MQCTL_STORE)."""


def completion(
    shell: Annotated[Literal["bash", "zsh", "fish"], typer.Argument(metavar="SHELL", help="bash, zsh or fish.")],
) -> None:
    import sys

    from mqctl.completions import script
    sys.stdout.write(script(shell))
    sys.stdout.flush()
