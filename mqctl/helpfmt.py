"""How help looks: Typer's rich help on a terminal, Click's plain help when piped or with
``NO_COLOR``, the same command panels and the same examples in both.

Help text is written once, in the commands' docstrings, as plain text: a paragraph whose
lines after the first are indented (``Examples:`` and its command lines) is shown line by
line, never rewrapped. :func:`polish` turns that rule into what each renderer needs — Click's
``\\b`` marker for plain help; escaped markup for rich help, so a ``[topic]`` in an example
is printed, not taken for a style — and gives every command its whole first sentence as its
line in the command list (Click would cut it at 45 columns). Rich is imported by Typer only
when help is actually rendered.
"""
from __future__ import annotations

import copy
import re
import sys
from typing import Any, Callable

import typer
from typer.core import TyperArgument, TyperGroup

# Panel -> the top-level commands it lists, in the order of ``mqctl --help``.
PANELS: dict[str, tuple[str, ...]] = {
    "Produce and consume": ("send", "consume", "msg"),
    "Groups and offsets": ("offsets", "progress", "consumers", "rebalance", "locks", "unlock", "dlq"),
    "Transactions": ("tx",),
    "Store and topics": ("init", "topic", "store", "top"),
    "Spark": ("query", "export"),
    "Benchmarks": ("bench",),
    "Shell": ("completion",),
}
PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}
ORDER = [name for names in PANELS.values() for name in names]

# Rich's markup tags start with a lowercase letter, '#', '/' or '@' (rich.markup.RE_TAGS);
# escaping them here keeps rich out of the import path until help is printed.
_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def markup_mode() -> str | None:
    """"rich" on a terminal (or piped with FORCE_COLOR), None (Click's plain help) when
    piped, with NO_COLOR, TERM=dumb, or without rich installed: as tables decide colour
    (``mqctl.output.color_allowed``)."""
    from mqctl.output import color_allowed
    if not color_allowed(sys.stdout):
        return None
    import importlib.util
    return "rich" if importlib.util.find_spec("rich") is not None else None


class RootGroup(TyperGroup):
    """The root command: commands listed panel by panel, in plain help as in rich help, and
    loaded on demand. ``loader(root, name)`` (set by ``mqctl/app.py``) imports a command's
    module when Click first asks for it; ``summary`` gives the command list its lines
    without importing anything."""

    loader: Callable[[Any, str], Any] | None = None
    summary: dict[str, str] = {}

    def list_commands(self, ctx: Any) -> list[str]:
        names = set(self.commands) | (set(ORDER) if self.loader is not None else set())
        rank = {name: i for i, name in enumerate(ORDER)}
        return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = self.commands.get(cmd_name)
        if cmd is None and self.loader is not None:
            cmd = self.loader(self, cmd_name)
        return cmd

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        from typer._click.exceptions import UsageError
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:   # Typer suggests among the loaded commands only
            if args and "Did you mean" not in exc.message:
                from difflib import get_close_matches
                matches = get_close_matches(args[0], self.list_commands(ctx))
                if matches:
                    exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(map(repr, matches))}?"
            raise

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for name in self.list_commands(ctx):
            cmd = self.commands.get(name)
            if cmd is None and name in self.summary:
                line = self.summary[name]
            else:
                cmd = self.get_command(ctx, name)
                if cmd is None or cmd.hidden:
                    continue
                line = cmd.get_short_help_str(200)
            sections.setdefault(PANEL_OF.get(name, "Commands"), []).append((name, line))
        width = max((len(n) for rows in sections.values() for n, _ in rows), default=0)
        for panel, rows in sections.items():   # one column for all panels
            with formatter.section(panel):
                formatter.write_dl([(n.ljust(width), line) for n, line in rows])


class Argument(TyperArgument):
    """An argument shown as ``TOPIC`` (required) or ``[BODY]`` (optional) in the usage line;
    Typer 0.28 writes ``{topic}`` for the first."""

    def make_metavar(self, ctx: Any, *, usage: bool = False) -> str:
        var = self.metavar or (self.name or "value").upper()
        if usage and not self.required and not var.startswith("["):
            var = f"[{var}]"
        return var + ("..." if self.nargs != 1 else "")


def _no_type_metavar(param: Any = None, ctx: Any = None) -> str:
    return ""


def first_sentence(text: str) -> str:
    """The help's first paragraph on one line, whole: what the command list shows."""
    return text.strip().split("\n\n", 1)[0].replace("\n", " ").strip()


def polish(command: Any, rich: bool) -> None:
    """Prepare every help text under ``command`` for the renderer (see the module doc)."""
    stack = [command]
    while stack:
        cmd = stack.pop()
        stack.extend(getattr(cmd, "commands", {}).values())
        if cmd.help:
            if not cmd.short_help:
                cmd.short_help = first_sentence(cmd.help)
            cmd.help = _render(cmd.help, rich)
        if cmd.epilog:
            cmd.epilog = _render(cmd.epilog, rich)
        if rich:
            if cmd.short_help:
                cmd.short_help = _escape(cmd.short_help)
            for p in cmd.params:
                if getattr(p, "help", None):
                    p.help = _escape(p.help)
        for p in cmd.params:
            if type(p) is TyperArgument:
                p.__class__ = Argument
                # rich help prints an argument's type beside its name (``TOPIC <str>``);
                # the name says it all.
                p.type = copy.copy(p.type)
                p.type.get_metavar = _no_type_metavar  # type: ignore[method-assign]
            if p.metavar is None:
                p.metavar = _metavar(p)
        name = getattr(cmd, "name", None)
        if name in PANEL_OF and hasattr(cmd, "rich_help_panel"):
            cmd.rich_help_panel = PANEL_OF[name]


def _metavar(param: Any) -> str | None:
    """The metavar a command did not spell out: ``TOPIC`` for an argument ``topic``, the
    choices for an enumeration, ``N`` for a number, else the option's long name in capitals
    (never Typer's ``{topic}`` or ``<str>``)."""
    from typer._click.types import BoolParamType, FloatParamType, IntParamType
    kind = param.type
    if getattr(param, "is_flag", False) or isinstance(kind, BoolParamType):
        return None
    if getattr(kind, "choices", None):
        return "[" + "|".join(str(c) for c in kind.choices) + "]"
    if param.param_type_name == "argument":
        return (param.name or "value").upper()
    if isinstance(kind, IntParamType):
        return "N"
    if isinstance(kind, FloatParamType):
        return "SECONDS" if "timeout" in (param.name or "") or "interval" in (param.name or "") else "NUM"
    longs = [o for o in param.opts if o.startswith("--")]
    return longs[0][2:].upper() if longs else "VALUE"


def _render(text: str, rich: bool) -> str:
    import inspect
    paragraphs = inspect.cleandoc(text).split("\n\n")
    out = []
    for para in paragraphs:
        para = para.replace("\b\n", "").replace("\b", "")
        lines = para.split("\n")
        literal = len(lines) > 1 and any(line.startswith("  ") for line in lines[1:])
        if rich:
            para = _escape(para)
            if literal:
                # Typer dedents the help with inspect.cleandoc; an empty markup tag in front
                # of an indented line keeps its indentation (and renders as nothing).
                first, *rest = para.split("\n")
                para = "\n".join([first] + [f"[bold][/bold]{line}" if line.startswith(" ") else line
                                             for line in rest])
            else:   # rich keeps source line breaks: prose must flow
                para = " ".join(line.strip() for line in para.split("\n"))
            out.append(para)
        else:
            out.append("\b\n" + para if literal else para)
    return "\n\n".join(out)


def _escape(text: str) -> str:
    return _TAG.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", text)


def new_typer(**kwargs: Any) -> typer.Typer:
    """The root Typer app, with the panel-aware group and the markup of this terminal."""
    return typer.Typer(cls=RootGroup, rich_markup_mode=markup_mode(), **kwargs)  # type: ignore[arg-type]
