"""A consumer writing to a terminal: keep what it wrote when Ctrl-C comes.

A terminal's driver discards its pending output when it sees an interrupt character (^C,
^\\, ^Z) unless ``NOFLSH`` is set. For a consumer that counts a line as consumed once its
write returned, that discarded output is lost: committed, never seen. ``tcdrain`` cannot
close the gap on a pseudo-terminal (every terminal emulator, ssh, tmux): the pty driver
keeps no output queue of its own, so ``tcdrain`` returns at once while the bytes wait in the
master's input buffer, where the interrupt flushes them. So while a consumer writes to its
terminal, ``NOFLSH`` is set and the interrupt leaves the output alone: every line whose write
returned is shown, and offsets commit only those. The setting is put back when the consumer
ends; a ``kill -9`` leaves it set, which only means a later ^C does not drop pending output.
"""
from __future__ import annotations

import contextlib
import os

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Iterator


@contextlib.contextmanager
def output_kept_on_interrupt(fd: int) -> Iterator[None]:
    """While the block runs, an interrupt typed on the terminal ``fd`` does not discard the
    output written to it. Nothing is changed when ``fd`` is not a terminal, or when this
    process is not in the terminal's foreground (changing a terminal's modes from the
    background would stop the process with SIGTTOU, and a background job gets no ^C)."""
    restore = _set_noflsh(fd)
    try:
        yield
    finally:
        if restore:
            import termios
            try:
                now = termios.tcgetattr(fd)
                now[3] &= ~termios.NOFLSH   # only our bit: the program may have changed others meanwhile
                termios.tcsetattr(fd, termios.TCSANOW, now)
            except (OSError, termios.error):
                pass


def _set_noflsh(fd: int) -> bool:
    """Set NOFLSH on ``fd`` if it is this process's foreground terminal and not set yet;
    whether it was set here (and so is to be cleared afterwards)."""
    try:
        if fd < 0 or not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
            return False
    except OSError:
        return False
    import termios  # (a terminal's: not loaded for a file or a pipe)
    try:
        attrs = termios.tcgetattr(fd)
        if attrs[3] & termios.NOFLSH:
            return False
        attrs[3] |= termios.NOFLSH
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
    except (OSError, termios.error):
        return False
    return True
