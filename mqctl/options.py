"""Shared option types, shell completion of names, and the store handle, so every command
spells its flags the same way.

One meaning per short flag, across every command (the README's flag table says the same;
``tests/cli/test_flags.py`` holds the commands to it):

====  ==================  =================================================================
flag  long name           meaning
====  ==================  =================================================================
-g    --group             consumer group
-t    --tag               a message's tag (send) or a tag filter (consume)
-k    --keys / --key      business keys (send: comma separated; msg query: one key)
-p    --property          a user property NAME=VALUE
-s    --sharding-key      same key -> same queue
-q    --queue             a queue id
-c    --count             how many messages
-e    --exit-at-end       stop when the queues are drained
-o    --from              where a group with no offset starts (kcat's -o)
-f    --format            output format
-x    --exec              a command run per message or transaction
-m    --msg-id            a message id
-a    --all               include system topics
-n    --dry-run           change nothing, print the plan
-y    --yes               skip the confirmation
-j    --json              NDJSON on stdout
-i    --input             stdin format of send
-D    --delimiter         record separator of send's stdin
-K    --key-delimiter     KEY<D>BODY lines on send's stdin
-r    --repeat            benchmark repetitions
-V    --version           print the version
-h    --help              help
====  ==================  =================================================================

``--topic`` has no short flag: ``-t`` is the tag, as in the contract's ``send``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer

from mqctl.state import State, resolve_store_path

if TYPE_CHECKING:
    from store import Store


# -- shell completion of names (runs at tab time: quick, read-only, never raises) -----------

def _store_on_line(ctx: typer.Context) -> str | None:
    """``--store`` as the user typed it: anywhere on the line being completed (the shell
    hands the words over in COMP_WORDS), not only before the command, as Click parsed it."""
    import os
    import shlex
    try:
        words = shlex.split(os.environ.get("COMP_WORDS", ""))
    except ValueError:
        words = []
    for i, word in enumerate(words):
        if word == "--store" and i + 1 < len(words):
            # interactive bash splits --store=DIR into three words (= is a word break)
            if words[i + 1] == "=" and i + 2 < len(words):
                return words[i + 2]
            return words[i + 1]
        if word.startswith("--store="):
            return word.split("=", 1)[1]
    found = ctx.find_root().params.get("store")
    return found if isinstance(found, str) else None


def join_bash_options() -> None:
    """Interactive bash splits ``--strategy=av`` into the words ``--strategy``, ``=``, ``av``
    (``=`` is in COMP_WORDBREAKS), and Click, handed them as they are, takes ``=`` for the
    option's value: ``--strategy=<TAB>`` completed nothing. Join them again in COMP_WORDS
    (newline-separated, as the bash script passes them) and COMP_CWORD, as Click reads an
    ``--option=value`` word; bash inserts a completion after the ``=``, which it kept."""
    import os
    words = os.environ.get("COMP_WORDS", "").split("\n")
    try:
        cword = int(os.environ.get("COMP_CWORD", ""))
    except ValueError:
        return
    out: list[str] = []
    at = cword
    i = 0
    while i < len(words):
        word = words[i]
        take = 1
        if word.startswith("--") and words[i + 1:i + 2] == ["="] and i + 1 <= cword:
            take = 2 if cword == i + 1 or i + 2 >= len(words) else 3   # (the cursor on "=": no value yet)
            word += "=" + (words[i + 2] if take == 3 else "")
        if i <= cword < i + take:
            at = len(out)
        out.append(word)
        i += take
    os.environ["COMP_WORDS"] = "\n".join(out)
    os.environ["COMP_CWORD"] = str(at)


def register_completions(root: Any) -> None:
    """Completion classes over Typer's, for this process (after the app is built, which
    registers Typer's). Every shell's: the words before the cursor rearranged as a run
    rearranges argv (``mqctl/argv.py``: ``--store DIR`` after the command moves to the front);
    Click otherwise took ``--store`` for the command's own and ``DIR`` for its first argument,
    and offered a filled one again (``topic status --store S zeta <TAB>``: ``zeta``). Bash's:
    completions as bash inserts them: a reply goes on the line as it is, so a character the
    shell reads specially (the ``|`` a topic name may hold) is escaped, as ``printf %q`` does
    (Typer's bash class prints values bare; zsh and fish quote what they insert)."""
    import re

    from typer._click.shell_completion import CompletionItem, add_completion_class
    from typer._completion_classes import BashComplete, FishComplete, ZshComplete

    from mqctl.argv import STORE, UTC, normalize

    helps = {opt: getattr(param, "help", None) or "" for param in root.params for opt in param.opts}
    movable = [(opt, helps.get(opt, "")) for opt in (STORE, UTC)]

    def with_globals(items: list[Any], args: list[str], incomplete: str) -> list[Any]:
        # The root's options, which a run takes after the command too (``mqctl/argv.py``), are
        # offered there as well: Click offers only the command's own.
        if args and incomplete.startswith("-") and "--" not in args:   # (after --, words are arguments)
            have = {item.value for item in items}
            items += [CompletionItem(opt, help=text) for opt, text in movable
                      if opt.startswith(incomplete) and opt not in have
                      and not any(a == opt or a.startswith(opt + "=") for a in args)]
        return items

    class AsRunBash(BashComplete):
        def get_completion_args(self) -> tuple[list[str], str]:
            args, incomplete = super().get_completion_args()
            return normalize(args, root), incomplete

        def get_completions(self, args: list[str], incomplete: str) -> list[Any]:
            return with_globals(super().get_completions(args, incomplete), args, incomplete)

        def format_completion(self, item: CompletionItem) -> str:
            return re.sub(r"([^A-Za-z0-9_%+,./:=@-])", r"\\\1", item.value)

    class AsRunZsh(ZshComplete):
        def get_completion_args(self) -> tuple[list[str], str]:
            args, incomplete = super().get_completion_args()
            return normalize(args, root), incomplete

        def get_completions(self, args: list[str], incomplete: str) -> list[Any]:
            return with_globals(super().get_completions(args, incomplete), args, incomplete)

    class AsRunFish(FishComplete):
        def get_completion_args(self) -> tuple[list[str], str]:
            args, incomplete = super().get_completion_args()
            return normalize(args, root), incomplete

        def get_completions(self, args: list[str], incomplete: str) -> list[Any]:
            return with_globals(super().get_completions(args, incomplete), args, incomplete)

    add_completion_class(AsRunBash, "bash")
    add_completion_class(AsRunZsh, "zsh")
    add_completion_class(AsRunFish, "fish")


def _completion_store(ctx: typer.Context) -> Store | None:
    try:
        from store import Store
        return Store.open(resolve_store_path(_store_on_line(ctx)), recover=False, warn=lambda _m: None)
    except Exception:  # noqa: BLE001 - completion must never fail loudly
        return None


def complete_group(ctx: typer.Context, incomplete: str) -> list[str]:
    """Group names known to the store."""
    store = _completion_store(ctx)
    if store is None:
        return []
    try:
        from store import Admin
        return [g for g in Admin.of(store).groups() if g.startswith(incomplete)]
    except Exception:  # noqa: BLE001
        return []
    finally:
        store.close()


def complete_topic(ctx: typer.Context, incomplete: str) -> list[str]:
    """Topic names of the store."""
    store = _completion_store(ctx)
    if store is None:
        return []
    try:
        from store import is_system_topic
        return sorted(t for t in store.topics() if t.startswith(incomplete) and not is_system_topic(t))
    except Exception:  # noqa: BLE001
        return []
    finally:
        store.close()


# -- the options every command spells the same way ------------------------------------------

JsonOpt = Annotated[bool, typer.Option("--json", "-j", help="One JSON object per line (NDJSON) on stdout.")]
GroupOpt = Annotated[str, typer.Option("--group", "-g", metavar="GROUP", help="Consumer group.",
                                       autocompletion=complete_group)]
OptionalGroupOpt = Annotated[Optional[str], typer.Option(
    "--group", "-g", metavar="GROUP", help="Only this consumer group.", autocompletion=complete_group)]
TopicFilterOpt = Annotated[Optional[str], typer.Option("--topic", metavar="TOPIC", help="Only this topic.",
                                                       autocompletion=complete_topic)]
TopicRequiredOpt = Annotated[str, typer.Option("--topic", metavar="TOPIC", help="Topic.",
                                               autocompletion=complete_topic)]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
TopicArg = Annotated[str, typer.Argument(metavar="TOPIC", help="Topic.", autocompletion=complete_topic,
                                         show_default=False)]


def parse_queue_ids(text: str, flag: str = "--queues") -> list[int]:
    """Queue ids from ``0,3``: sorted, without duplicates, at least one, each >= 0."""
    from store.errors import UsageError
    try:
        ids = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        ids = []
    if not ids or ids[0] < 0:
        raise UsageError(f"{flag} {text!r}: expected queue ids like 0,3")
    return ids


def state(ctx: typer.Context) -> State:
    obj = ctx.find_root().obj
    assert isinstance(obj, State)
    return obj


# -- sizes: bytes, or a number with a unit ---------------------------------------------------

# KiB/MiB/GiB and their one-letter forms K/M/G (as dd, docker and RocketMQ's own docs use them)
# count in 1024s; KB/MB/GB in 1000s (SI, as GNU coreutils). Case is not significant.
SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30,
              "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}
SIZE_HELP = "bytes, or with a unit: KiB, MiB, GiB (K, M, G alike), KB, MB, GB (powers of 1000)"


def size_parser(lo: int, hi: int | None = None) -> Callable[[str | int], int]:
    """A Typer ``parser`` of a size flag: ``4194304``, ``4MiB``, ``512k``, ``1.5KiB``, within
    ``lo``..``hi`` bytes. ``typer.BadParameter`` (a one-line usage error, exit 2) naming the value."""
    import re
    number = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")

    def parse(text: str | int) -> int:
        if isinstance(text, int):   # (the default, which Click passes through the parser too)
            return text
        m = number.fullmatch(text)
        unit = SIZE_UNITS.get(m.group(2).lower()) if m else None
        if m is None or unit is None:
            raise typer.BadParameter(f"{text!r} is not a size ({SIZE_HELP})")
        whole, _, frac = m.group(1).partition(".")
        tenths: int = 10 ** len(frac)
        scaled = int(whole) * unit + int(frac or "0") * unit // tenths
        if int(frac or "0") * unit % tenths:
            raise typer.BadParameter(f"{text!r} is not a whole number of bytes")
        if scaled < lo or (hi is not None and scaled > hi):   # (in Click's words for a number)
            shown = text.strip() if str(scaled) == text.strip() else f"{text.strip()} ({scaled} bytes)"
            bounds = f"x>={lo}" if hi is None else f"{lo}<=x<={hi}"
            raise typer.BadParameter(f"{shown} is not in the range {bounds}.")
        return scaled
    return parse
