"""The Python client of a store: producers, consumers, transactions and inspection.

Everything here is exported from the package :mod:`store` (``store.Producer``,
``store.Consumer``, ``store.Admin``, ...); ``mqctl`` is a thin command line over the same
code. The transactional producers are in :mod:`store.tx`. Modules, by job:

Producing
``paths``          which store ``path=None`` means (``$MQCTL_STORE``, else ``~/.mqctl/store``)
``handle``         what every client object shares: one store handle and its ``with`` block
``producer``       :class:`~store.client.producer.Producer`; ``sendresult`` its ``SendResult``
``aio_producer``   :class:`~store.client.aio_producer.AsyncProducer` (writes off the event loop)
``groupcommit``    the producer's group commit for ``flush="sync"`` (fsyncs in a thread)
``propnames``      :class:`~store.client.propnames.Prop`: the store's reserved property names
``properties``     a message's properties (tags, keys, user properties, sharding key): the one
                   builder and its checks, for the producers and ``mqctl`` alike
``envelope``       a message's JSON object (``consume --json``, ``send --input json``)
``creation``       creating a store, or finding the one there (``mqctl init``)

Consuming
``message``        :class:`~store.client.message.Message` (and a pull's ``MessageRows``)
``consumer``       :class:`~store.client.consumer.Consumer` (iterator and push styles);
                   ``consumer_args`` what its arguments mean, ``consumer_life`` its membership,
                   ``handoff`` the hand-over to the thread iterating it
``aio_consumer``   :class:`~store.client.aio_consumer.AsyncConsumer`; ``aio_driver`` runs its
                   runtime on the event loop, ``aio_life`` its membership, ``aio_sinks`` its
                   sinks, ``aio_shared`` what the consumers of one loop share
``runtime``        the consumer runtime: one member of a group, its loop and its life; its parts:
                   ``options`` (what it is told), ``sinks`` (where batches go), ``clocks``
                   (when periodic looks are due), ``stopsignals`` (SIGINT and SIGTERM),
                   ``rebalance``, ``allocate`` and ``holding`` (which queues it holds),
                   ``startpoint`` (where a queue without an offset starts), ``pulling``,
                   ``process_queue`` (a held queue's cache), ``dispatch``, ``offset_keeper`` and
                   ``offset_writer`` (its offsets), ``configwatch`` (its watch of ``config/``),
                   ``retry`` (the retry topic and the dead-letter queue), ``dedup``
                   (``--dedup``'s log), ``stage`` (exactly-once outputs, ``to=``)
``members``        group membership (member records, who is live); ``memberview`` what the
                   admin views show of members, ``subscriptions`` that members subscribe alike,
                   ``leases`` how long a member's claims last
``qlocks``         queue locks (orderly and clustering members); ``locktable`` the lock table as
                   operators see it, ``group_mutex`` the group's mutex
``rules``          argument rules shared with ``mqctl`` (contradictory consume options), and
                   how error messages name arguments

Inspecting
``admin``          :class:`~store.client.admin.Admin`: topics, lag, offsets, locks, members,
                   rebalance previews, dead letters; its parts ``admin_base`` (the store
                   handle), ``offsets_admin``, ``members_admin``, ``groups`` (what a group is),
                   its rows ``admin_rows`` (on ``rows``, the base of every row)
``maintenance``    Admin's whole-store operations: check, recover, stats, clean, staging
``txadmin``        Admin's transactions by id: prepare, list, commit/rollback, check
``dlq``            a group's dead letters, resending them, and the record of what was resent
``history``        a message's copies and events (``msg show``)
``monitor``        :class:`~store.client.monitor.Monitor` (``mqctl top``): repeated read-only
                   looks, each a ``snapshot``; ``recoverylook`` what the next opener would
                   repair; ``trends`` rates and time to drain from successive snapshots
"""
