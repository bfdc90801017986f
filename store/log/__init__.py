"""The storage engine: the commit log, consume queues, key index, checkpoint, the write
path, reads, recovery, check, retention, topics and the delay scheduler. ``Store``
(``store.log.messagestore``) is its façade."""
