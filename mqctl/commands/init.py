"""``mqctl init``: create the store at the selected path, or find the one there
(``store/client/creation.py``)."""
from __future__ import annotations

from typing import Annotated

import typer

from mqctl.options import SIZE_HELP, size_parser, state
from store import LARGEST_MESSAGE_SIZE, MAX_SEGMENT_SIZE


def register(app: typer.Typer) -> None:
    app.command("init", help=INIT_HELP)(init)


INIT_HELP = """Create the store at the selected path (idempotent).

The settings are fixed when the store is created; on an existing store they are ignored
(a warning says which differ).

Examples:
  mqctl init
  mqctl --store ./mq init --no-auto-create
  mqctl init --max-message-size 1MiB --segment-size 8MiB"""


# The flag (and its parameter) that sets each setting ``store.client.creation`` reports as ignored.
INIT_FLAGS = {"max_message_size": ("--max-message-size", "max_message_size"),
              "commitlog_segment_size": ("--segment-size", "segment_size"),
              "auto_create_topics": ("--no-auto-create", "no_auto_create")}


def init(
    ctx: typer.Context,
    no_auto_create: Annotated[bool, typer.Option(
        "--no-auto-create", help="Refuse sends to topics that were not created first.")] = False,
    max_message_size: Annotated[int, typer.Option(
        "--max-message-size", metavar="SIZE", parser=size_parser(1, LARGEST_MESSAGE_SIZE),
        show_default=False, help=f"Largest body ({SIZE_HELP}; default and most: 4MiB).")] = LARGEST_MESSAGE_SIZE,
    segment_size: Annotated[int, typer.Option(
        "--segment-size", metavar="SIZE", parser=size_parser(0, MAX_SEGMENT_SIZE),
        show_default=False, help="Commit-log segment size (as --max-message-size; default 64MiB); at least "
             "--max-message-size + 64 KiB (4259840 with the default 4 MiB).")] = 64 * 1024 * 1024,
) -> None:
    from mqctl.argnames import ARG_FLAGS
    from mqctl.output import Output, human_size
    from store import StoreSettings, create_store
    st = state(ctx)
    res = create_store(st.store_path, StoreSettings(max_message_size=max_message_size, commitlog_segment_size=segment_size,
                                                    auto_create_topics=not no_auto_create), arg_names=ARG_FLAGS)
    s, out = res.settings, Output()
    if res.created:
        out.info(f"initialised store at {st.store_path} (messages up to {human_size(s.max_message_size)}, "
                 f"{human_size(s.commitlog_segment_size)} segments"
                 f"{', topics created on first send' if s.auto_create_topics else ', topics made by topic create'})")
        return
    out.info(f"store already exists at {st.store_path}")
    # Only the flags given on this line: a plain ``mqctl init`` of a store made with other
    # settings asked for nothing (the defaults it compared with were not the user's choice).
    from typer._click.core import ParameterSource
    given = [flag for f in res.ignored for flag, param in [INIT_FLAGS[f]]
             if ctx.get_parameter_source(param) not in (ParameterSource.DEFAULT, None)]
    if given:
        out.warn(f"{', '.join(given)} ignored: an existing store keeps the settings it was created with")
