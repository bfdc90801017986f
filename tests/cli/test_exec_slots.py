"""``--threads`` slots of ``consume --exec`` go first come, first served
(``mqctl/consumer/slots.py``): a batch that waits for a slot is never overtaken by a later one."""
from __future__ import annotations

import threading

from mqctl.consumer.slots import FifoSlots


def test_a_freed_slot_goes_to_the_oldest_waiting_ticket() -> None:
    slots = FifoSlots(1)
    first = slots.ticket()
    waiting = [slots.ticket() for _ in range(3)]
    assert first.is_set() and not any(t.is_set() for t in waiting)
    slots.release()
    assert [t.is_set() for t in waiting] == [True, False, False]
    # a new ticket queues behind the waiting ones, even at the moment a slot frees
    late = slots.ticket()
    slots.release()
    assert [t.is_set() for t in waiting] == [True, True, False] and not late.is_set()


def test_a_withdrawn_ticket_gives_its_turn_or_its_slot_back() -> None:
    slots = FifoSlots(1)
    first, queued, after = slots.ticket(), slots.ticket(), slots.ticket()
    slots.withdraw(queued)            # still waiting: only leaves the queue
    slots.release()
    assert after.is_set() and not queued.is_set()
    slots.withdraw(after)             # it had the slot: the slot is free again
    assert slots.ticket().is_set()
    assert first.is_set()


def test_waiting_threads_start_in_ticket_order() -> None:
    slots = FifoSlots(1)
    hold = slots.ticket()
    order: list[int] = []
    tickets = [slots.ticket() for _ in range(8)]

    def run(i: int) -> None:
        tickets[i].wait()
        order.append(i)
        slots.release()
    threads = [threading.Thread(target=run, args=(i,)) for i in reversed(range(8))]
    for t in threads:
        t.start()
    assert hold.is_set()
    slots.release()
    for t in threads:
        t.join(10)
    assert order == list(range(8))
