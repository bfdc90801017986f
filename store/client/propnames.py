""":class:`Prop`: the names of the properties the store itself sets on a stored message, for
programs that read them from a :class:`store.StoredMessage` (``msg.properties[Prop.REAL_TOPIC]``).
The names are defined once, beside the record format in ``store/log/record.py``."""
from __future__ import annotations

from store.log import record as _r

TYPE_CHECKING = False   # (typing's own, without importing typing: see store/__init__.py)
if TYPE_CHECKING:
    from typing import Final


class Prop:
    """Reserved property names (RocketMQ's ``MessageConst``), as stored in a record."""

    TAGS: Final = _r.PROP_TAGS                    # the message's tag
    KEYS: Final = _r.PROP_KEYS                    # business keys, space separated
    UNIQ_KEY: Final = _r.PROP_UNIQ_KEY            # the producer's message id (msgId)
    SHARDING_KEY: Final = _r.PROP_SHARDING_KEY    # what chose the queue
    REAL_TOPIC: Final = _r.PROP_REAL_TOPIC        # a parked (delayed, half) message's destination
    REAL_QID: Final = _r.PROP_REAL_QID            # ... and its queue there
    DELIVER_MS: Final = _r.PROP_DELIVER_MS        # when a delayed message is due (ms since the epoch)
    RETRY_TOPIC: Final = _r.PROP_RETRY_TOPIC      # the topic a retried message first came from
    ORIGIN_MESSAGE_ID: Final = _r.PROP_ORIGIN_MESSAGE_ID          # a retry's original message
    DLQ_ORIGIN_MESSAGE_ID: Final = _r.PROP_DLQ_ORIGIN_MESSAGE_ID  # a dead letter's original message
    DLQ_ORIGIN_TOPIC: Final = _r.PROP_DLQ_ORIGIN_TOPIC            # ... and its topic
    TRANSACTION_ID: Final = _r.PROP_TRANSACTION_ID                # a transactional message's id
