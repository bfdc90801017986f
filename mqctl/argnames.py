"""How the library's errors name arguments on the command line: one table, passed as
``arg_names`` wherever ``mqctl`` calls ``store`` (the Python spellings are
``store.client.rules.PYTHON_NAMES``). Typer-free: ``send``'s quick path imports it."""
from __future__ import annotations

ARG_FLAGS = {
    "broadcast": "--broadcast", "orderly": "--orderly", "dedup": "--dedup", "strategy": "--strategy",
    "queues": "--queues", "queues_example": "--queues 0,3", "max_reconsume": "--max-reconsume",
    "retry_delay": "--retry-delay", "suspend": "--suspend-ms", "consumers": "--consumers",
    "consumers_example": "--consumers a,b", "consumers_hint": "--consumers C1,C2",
    "client_id": "--client-id", "force": "--force", "queue": "--queue", "topic": "--topic", "to": "--to",
    "segment_size": "--segment-size",
    # a message's properties (store/client/properties.py)
    "tags": "--tag", "key": "--keys", "key_with_spaces": "--keys: a key may not contain spaces",
    "properties": "--property", "properties_arg": "--property", "keys": "--keys", "sharding_key": "--sharding-key",
}

# A ``send --input json`` line's fields, as an error about one names it.
JSON_FIELD_NAMES = {
    "tags": "'tags'", "key": "'keys'", "key_with_spaces": "'keys': a key may not contain spaces",
    "properties": "property", "properties_arg": "'properties'", "keys": "'keys'", "sharding_key": "'shardingKey'",
}
