"""The consumer runtime behind ``mqctl consume``: rebalance, pull, process queues, handlers."""
