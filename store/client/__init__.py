"""The Python client of a store: producers, consumers, transactions and inspection.

Everything here is exported from the package :mod:`store` (``store.Producer``,
``store.Consumer``, ``store.TransactionProducer``, ``store.Admin``, ...); ``mqctl`` is a thin
command line over the same code. Modules:

``paths``        which store ``path=None`` means (``$MQCTL_STORE``, else ``~/.mqctl/store``)
``message``      :class:`~store.client.message.Message` (and a pull's :class:`~store.client.message.MessageRows`)
``sendresult``   :class:`~store.client.sendresult.SendResult`
``producer``     :class:`~store.client.producer.Producer`
``groupcommit``  the producer's group commit for ``flush="sync"`` (fsyncs in a thread)
``propnames``    :class:`~store.client.propnames.Prop`: the store's reserved property names
``properties``   a message's properties (tags, keys, user properties, sharding key): the one
                 builder and its checks, for the producers and ``mqctl`` alike
``runtime``      the consumer runtime: one member of a group, its loop and its life; its parts:
                 ``options`` (what it is told), ``sinks`` (where batches go), ``rebalance``
                 and ``holding`` (which queues it holds), ``pulling``, ``dispatch``,
                 ``offset_keeper`` (its offsets), ``retry`` (failed messages: the retry topic
                 and the dead-letter queue), ``process_queue`` (a held queue's cache)
``consumer``     :class:`~store.client.consumer.Consumer` (iterator and push styles); ``handoff``
                 the hand-over to the thread iterating it
``txproducer``   :class:`~store.client.txproducer.TransactionProducer` and ``TxState``
``admin``        :class:`~store.client.admin.Admin`: topics, lag, offsets, locks, members,
                 rebalance previews, dead letters; its parts ``admin_base`` (the store
                 handle), ``offsets_admin``, ``members_admin``, its rows ``admin_rows``, and
                 ``groups`` (what a group is)
``maintenance``  Admin's whole-store operations: check, recover, stats, clean, staging
``txadmin``      Admin's transactions by id: prepare, list, commit/rollback, check
``history``      a message's copies and events (``msg show``)
``qlocks``       queue locks (orderly and clustering members), ``group_mutex`` the group's mutex
``dlq``          a group's dead letters, resending them, and the record of what was resent
``rules``        argument rules shared with ``mqctl`` (contradictory consume options), and
                 how error messages name arguments
``rows``         the base of the rows the client returns
``creation``     creating a store, or finding the one there (``mqctl init``)
"""
