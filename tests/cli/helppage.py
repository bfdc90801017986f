"""What every command's help must do at 80 columns, checked for one command: the help
source's examples fit (72 characters, once help indents them), the piped page shows each of
them unwrapped, no Click-style metavar (``{a|b}``, ``<str>``) shows, and the first sentence
fits the command list. The command's own tests check its metavars on the page returned."""
from __future__ import annotations

from tests.procs import MQ


def help_at_80_columns(mq: MQ, command: str, source: str) -> str:
    """``mqctl COMMAND --help`` piped at 80 columns, checked against ``source`` (the help text
    the command is declared with). Returns the page."""
    examples = source.split("Examples:\n", 1)[1].rstrip("\n").splitlines()
    assert examples and all(len(line) <= 72 for line in examples), [x for x in examples if len(x) > 72]
    page = mq.ok(command, "--help", extra_env={"COLUMNS": "80"}).out
    lines = page.splitlines()
    for line in examples:
        assert "  " + line in lines, line
    assert "{" not in page and "<str>" not in page
    first = source.split("\n", 1)[0]
    assert len(first) <= 60 and first.endswith(".") and "\b" not in source
    return page
