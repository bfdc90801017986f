"""The root of the command line: global options and the table of contents of the commands.

Each command group lives in its own module under ``mqctl/commands``; this file is the table
of contents (:data:`GROUPS`, with each command's line of help in :data:`SUMMARY`). Exceptions
become exit codes in one place, :func:`mqctl.errors.guard`; Typer's own outcomes (usage
errors, exits) are turned into codes by :func:`main` here.

Start-up is paid per command (every ``mqctl`` process pays for its imports): the root command
loads a command's module only when Click asks for that command (:func:`load_command`), so
``mqctl send …`` never imports ``tx``, ``bench`` or ``sparkcmd`` nor evaluates their
annotations, and ``mqctl --help`` (piped), an unknown command and ``--version`` import none.
Before any of this, the ``mqctl`` script (``mqctl/entry.py``) runs a one-message send without
Typer at all. The module attribute :data:`app` (used by tests and ``CliRunner``) is the full
app, built on first use.
"""
from __future__ import annotations

import os
import sys
from importlib import import_module
from typing import Annotated, Any, Optional

import typer

from mqctl import __version__
from mqctl.entry import COMPLETE_VAR
from mqctl.errors import EXIT_INTERRUPTED, guard, print_error
from mqctl.state import State, resolve_store_path

EPILOG = (
    "'mqctl help CMD' is 'mqctl CMD --help'. "
    "Exit codes: 0 ok, 1 operation or handler failed, 2 usage, 3 not found, 4 conflict, "
    "5 data error, 130 interrupted, 141 stdout closed, 143 terminated."
)

# -- the table of contents -----------------------------------------------------------------
# Module under ``mqctl/commands`` -> the top-level names its ``register(app)`` adds, in the
# order of ``mqctl --help``. tests/test_startup.py checks this table against the modules.
GROUPS: dict[str, tuple[str, ...]] = {
    "init": ("init",),
    "topic": ("topic",),
    "send": ("send",),
    "consume": ("consume",),
    "msg": ("msg",),
    "storecmd": ("store",),
    "tx": ("tx",),
    "offsets": ("offsets",),
    "progress": ("progress",),
    "admin": ("locks", "consumers", "rebalance", "unlock"),
    "top": ("top",),
    "completion": ("completion",),
    "dlq": ("dlq",),
    "sparkcmd": ("query", "export"),
    "bench": ("bench",),
}
COMMAND_MODULE = {name: module for module, names in GROUPS.items() for name in names}
# Each command's line in ``mqctl --help``: the root's help is printed without importing a
# single command module. tests/cli/test_startup.py checks it against the commands' own help.
SUMMARY: dict[str, str] = {
    "send": "Send one message (BODY) or many (stdin, one per line).",
    "consume": "Consume a topic as a member of a consumer group.",
    "msg": "Look messages up by id or key.",
    "offsets": "Show, reset and delete a group's committed offsets.",
    "progress": "Lag per queue of a consumer group.",
    "consumers": "Live members of a group and the queues each holds.",
    "rebalance": "Preview how a strategy shares a topic's queues.",
    "locks": "Orderly consumers' queue locks, with their holders probed.",
    "unlock": "Release queue locks of dead or stuck holders.",
    "top": "Live view of topics, groups, queue locks and problems.",
    "dlq": "Dead-letter queues: list a group's dead letters, resend them.",
    "tx": "Transactional messages: half messages, commit, rollback, check.",
    "init": "Create the store at the selected path (idempotent).",
    "topic": "Create, list, inspect, grow and delete topics.",
    "store": "Verify, repair, measure and clean the store.",
    "query": "Run Spark SQL over the store's topics.",
    "export": "Write a topic's messages to Parquet or JSON files.",
    "bench": "Built-in benchmarks (on a throwaway store).",
    "completion": "Print the shell completion script for bash, zsh or fish.",
}


def _new_app() -> typer.Typer:
    from mqctl.helpfmt import new_typer
    app = new_typer(
        name="mqctl",
        help="A RocketMQ-style message queue in a directory: no broker, many processes, one store.",
        epilog=EPILOG,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(root)
    return app


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"mqctl {__version__}\n")
        raise typer.Exit(0)


def root(
    ctx: typer.Context,
    store: Annotated[Optional[str], typer.Option(
        "--store", metavar="DIR",
        help="Store directory (else $MQCTL_STORE, else ~/.mqctl/store).")] = None,
    utc: Annotated[bool, typer.Option(
        "--utc", help="Print times in UTC (ISO-8601) instead of local time.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """A RocketMQ-style message queue in a directory: no broker, many processes, one store."""
    ctx.obj = State(resolve_store_path(store), utc=utc)
    ctx.call_on_close(ctx.obj.close)


_APPS: dict[tuple[str, ...], typer.Typer] = {}


def build_app(modules: tuple[str, ...] | None = None) -> typer.Typer:
    """The app with the command groups of ``modules`` (names of :data:`GROUPS`; all when None),
    registered in table order. Built once per selection and kept, so the command Typer makes
    of it can be cached by identity."""
    from mqctl.helpfmt import markup_mode
    key = (*(m for m in GROUPS if modules is None or m in modules), f"markup={markup_mode()}")
    app = _APPS.get(key)
    if app is None:
        app = _new_app()
        for name in key[:-1]:
            import_module(f".commands.{name}", __package__).register(app)
        _resolve_annotations(app)
        _APPS[key] = app
    return app


def _resolve_annotations(app: typer.Typer) -> None:
    """Evaluate the (string, ``from __future__ import annotations``) annotations of every
    command callback once, in place. Typer evaluates each of them twice when it builds the
    command (``inspect.signature(eval_str=True)``, then ``get_type_hints``): ~1,000 ``eval``
    calls for the whole tree, half of ``mqctl --help``'s start-up. Already evaluated
    annotations make both of Typer's passes cheap. A callback whose annotations do not
    evaluate here is left as it was (Typer then reports the error as before)."""
    import inspect
    stack = [app]
    while stack:
        t = stack.pop()
        funcs: list[Any] = [c.callback for c in t.registered_commands]
        if t.registered_callback is not None:
            funcs.append(t.registered_callback.callback)
        for g in t.registered_groups:
            if g.typer_instance is not None:
                stack.append(g.typer_instance)
            funcs.append(g.callback)
        for f in funcs:
            ann = getattr(f, "__annotations__", None)
            if not ann or not any(isinstance(v, str) for v in ann.values()):
                continue
            try:
                f.__annotations__ = inspect.get_annotations(f, eval_str=True)
            except Exception:
                pass


def command_for(argv: list[str]) -> Any:
    """The root command, its help prepared for this terminal. Command modules are imported
    when Click asks for a command by name (:func:`load_command`): ``mqctl send …`` imports
    ``send`` alone, ``mqctl --help`` (piped) none, an unknown command none."""
    from mqctl.helpfmt import RootGroup, markup_mode, polish
    command = typer.main.get_command(build_app(()))
    assert isinstance(command, RootGroup)
    polish(command, rich=markup_mode() == "rich")
    command.loader = load_command
    command.summary = SUMMARY
    return command


def load_command(root: Any, name: str) -> Any:
    """Import the module of command ``name``, add its commands to ``root``; the command, or
    None for a name no module has."""
    from mqctl.helpfmt import markup_mode, polish
    module = COMMAND_MODULE.get(name)
    if module is None:
        return None
    rich = markup_mode() == "rich"
    for n, cmd in typer.main.get_command(build_app((module,))).commands.items():  # type: ignore[attr-defined]
        polish(cmd, rich=rich)
        root.commands[n] = cmd
    return root.commands.get(name)


def __getattr__(name: str) -> Any:
    # ``from mqctl.app import app``: the full app, built on first use (not at import, so the
    # ``mqctl`` script pays only for the command it runs).
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the full command line (``mqctl.entry`` comes first): run the app, map
    every failure to an exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    sys.exit(guard(lambda: _run(args), args))


def _run(args: list[str]) -> int:
    """The Typer app on ``args``; Typer's own outcomes (exit, usage error, abort) as codes,
    everything else raised to :func:`mqctl.errors.guard`."""
    from typer import Abort, Exit
    from typer._click.exceptions import ClickException
    completing = os.environ.get(COMPLETE_VAR)
    if not completing:
        args = help_alias(args)
    elif completing == "complete_bash":
        from mqctl.options import join_bash_options
        join_bash_options()
    command = command_for(args)
    if completing:
        from mqctl.options import register_completions
        register_completions(command)   # (after the app is built, which registers Typer's own)
    else:
        from mqctl.argv import normalize
        args = normalize(args, command)
    try:
        rv = command.main(args=args, prog_name="mqctl", standalone_mode=False)
    except Exit as exc:
        return exc.exit_code
    except ClickException as exc:
        _show_usage_error(exc, _command_path(command, args))
        return exc.exit_code
    except Abort:
        raise KeyboardInterrupt from None
    code = rv if isinstance(rv, int) else 0
    if code == EXIT_INTERRUPTED:   # Typer turns Ctrl-C into a silent return of 130
        print_error("interrupted")
    return code


def help_alias(args: list[str]) -> list[str]:
    """``mqctl help [CMD …]`` as ``mqctl [CMD …] --help`` (git, cargo and rpk take it too):
    ``help`` counts only as the first word that is not a global option."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--store":
            i += 2
        elif word.startswith("--store=") or word == "--utc":
            i += 1
        elif word == "help":
            rest = args[i + 1:]
            return args[:i] + (rest[1:] if rest[:1] == ["help"] else rest) + ["--help"]   # (help help: the root's)
        else:
            break
    return args


def _command_path(root: Any, args: list[str]) -> str:
    """The command ``args`` name (``mqctl topic create``), for an error Click raised without
    its context (an option missing its value: "Option '-g' requires an argument.")."""
    path, node, skip = ["mqctl"], root, False
    for word in args:
        if skip or word.startswith("-"):
            skip = word == "--store"   # (the one option before a command that takes a value)
            continue
        sub = node.get_command(None, word) if hasattr(node, "commands") else None
        if sub is None:
            break
        path.append(word)
        node = sub
    return " ".join(path)


def _show_usage_error(exc: Exception, path: str = "mqctl") -> None:
    """Typer's own errors (unknown flag, bad value, missing argument) as the contract's one
    line ``mqctl: error: … (see 'mqctl CMD --help')``; a bare command group prints its help,
    then the line that says what is missing (all on stderr, exit 2)."""
    from typer._click.exceptions import NoArgsIsHelpError
    if isinstance(exc, NoArgsIsHelpError):
        exc.show()
        group = exc.ctx
        path = group.command_path if group is not None else "mqctl"
        lister = getattr(group.command, "list_commands", None) if group is not None else None
        names = lister(group) if lister is not None else []
        which = f": one of {', '.join(names)}" if 0 < len(names) <= 8 else " (listed above)"
        print_error(f"missing command after '{path}'{which}")
        return
    message = exc.format_message()  # type: ignore[attr-defined]
    # Click names its types ("not a valid int range"); a person wants the kind of value
    for kind, words in (("int range", "a whole number"), ("integer", "a whole number"),
                        ("float range", "a number"), ("float", "a number")):
        message = message.replace(f"is not a valid {kind}.", f"is not {words}.")
    ctx = getattr(exc, "ctx", None)
    message = f"{message} (see '{ctx.command_path if ctx is not None else path} --help')"
    print_error(message)
