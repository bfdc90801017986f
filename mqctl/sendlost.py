"""What ``send --json`` says when its results cannot all reach stdout. The messages are
stored whatever happens to stdout, so the error names them: a script that resends on
failure must not send them twice."""
from __future__ import annotations

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from mqctl.sender import Sender


def stdout_failed(sender: Sender) -> None:
    """At the end of a send (whatever ended it): when stdout failed, its error (stdout
    closed or gone: raised) or its notice (the reader left: printed, the BrokenPipe that
    ended the send goes on, exit 141)."""
    if sender.lost is not None:
        raise sender.results_lost() from sender.lost
    if sender.unprinted:
        unprinted_notice(sender.sent, sender.unprinted, sender.first_unprinted, sender.last_id)


def results_lost(lost: OSError | None, sent: int, last_id: str) -> Exception:
    """The error of a ``--json`` send whose result lines could not be written (stdout closed
    with ``>&-``, or gone: exit 1, as a command whose data cannot be written): what was
    stored, and the last msg id."""
    from mqctl.errors import stdout_failure
    from mqctl.output import plural
    from store.errors import OperationError
    assert lost is not None
    stored = ("the message was stored" if sent == 1 else
              f"the first {plural(sent, 'message')} of the input were stored, the last")
    return OperationError(f"{stdout_failure(lost)}; {stored} with msg id {last_id}")


def unprinted_notice(sent: int, unprinted: int, first_id: str, last_id: str) -> None:
    """After the reader closed stdout (``send --json | head -1``, exit 141 still): one line
    on stderr saying how many messages were stored and the msg ids of those whose results
    could not be written, the first to the last."""
    import sys

    from mqctl.output import plural
    # (A failed write of several lines may have written some of them, and a line written
    # just before may never have been read: the count stored and the ids are what is sure.)
    lost = (f"the result of the last could not be written (msg id {last_id})" if unprinted == 1 else
            f"the results of the last {unprinted} could not all be written (msg ids {first_id} to {last_id})")
    # (a note, not an error: 141 is the closed pipe's own status, as every command gives it)
    try:
        sys.stderr.write(f"mqctl: stdout was closed by the reader after {plural(sent, 'message')} "
                         f"were stored; {lost}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
