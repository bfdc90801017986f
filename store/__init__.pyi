"""The names ``store`` exports lazily (``_EXPORTS`` in ``__init__.py``), for type checkers.
Made from ``_EXPORTS`` by ``python -m tests.test_structure``; a test keeps them equal."""

from store.buffers import keep_big_buffers as keep_big_buffers
from store.client.admin import Admin as Admin
from store.client.admin_rows import LockRow as LockRow
from store.client.admin_rows import MemberRow as MemberRow
from store.client.admin_rows import ResetPlan as ResetPlan
from store.client.aio_consumer import AsyncConsumer as AsyncConsumer
from store.client.aio_producer import AsyncProducer as AsyncProducer
from store.client.consumer import Consumer as Consumer
from store.client.creation import StoreCreation as StoreCreation
from store.client.creation import create_store as create_store
from store.client.envelope import envelope as envelope
from store.client.history import message_report as message_report
from store.client.history import timeline as _message_timeline
from store.client.message import Message as Message
from store.client.monitor import Monitor as Monitor
from store.client.options import ConsumeOptions as ConsumeOptions
from store.client.options import default_broadcast_client_id as default_broadcast_client_id
from store.client.paths import resolve_store_path as resolve_store_path
from store.client.producer import Producer as Producer
from store.client.properties import build_properties as build_properties
from store.client.properties import check_msg_id as check_msg_id
from store.client.properties import check_properties_room as check_properties_room
from store.client.properties import properties_room as properties_room
from store.client.propnames import Prop as Prop
from store.client.rules import check_consume_options as check_consume_options
from store.client.runtime import Runtime as _ConsumerRuntime
from store.client.sendresult import SendResult as SendResult
from store.client.sinks import Outcome as Outcome
from store.client.snapshot import GroupStat as GroupStat
from store.client.snapshot import LockStat as LockStat
from store.client.snapshot import MemberStat as MemberStat
from store.client.snapshot import PendingTx as PendingTx
from store.client.snapshot import Problems as Problems
from store.client.snapshot import QueueLag as QueueLag
from store.client.snapshot import Snapshot as Snapshot
from store.client.snapshot import TopicStat as TopicStat
from store.client.stage import check_stage as check_stage
from store.client.trends import Drain as Drain
from store.client.trends import History as History
from store.client.trends import format_duration as format_duration
from store.client.trends import sparkline as sparkline
from store.errors import BadInputError as BadInputError
from store.errors import ClientIdInUseError as ClientIdInUseError
from store.errors import ConflictError as ConflictError
from store.errors import CorruptionError as CorruptionError
from store.errors import DamageFoundError as DamageFoundError
from store.errors import DataError as DataError
from store.errors import GroupNotFoundError as GroupNotFoundError
from store.errors import HandlerError as HandlerError
from store.errors import InvalidNameError as InvalidNameError
from store.errors import InvalidPropertyError as InvalidPropertyError
from store.errors import LockHeldError as LockHeldError
from store.errors import MessageNotFoundError as MessageNotFoundError
from store.errors import MessageTooLargeError as MessageTooLargeError
from store.errors import NotFoundError as NotFoundError
from store.errors import OperationError as OperationError
from store.errors import StoreError as StoreError
from store.errors import StoreIOError as StoreIOError
from store.errors import StoreNotFoundError as StoreNotFoundError
from store.errors import TopicExistsError as TopicExistsError
from store.errors import TopicNotFoundError as TopicNotFoundError
from store.errors import TransactionNotFoundError as TransactionNotFoundError
from store.errors import TransactionStateError as TransactionStateError
from store.errors import UsageError as UsageError
from store.log.check import CheckReport as CheckReport
from store.log.format import MAX_QUEUES as MAX_QUEUES
from store.log.messagestore import Store as Store
from store.log.messagestore import open_store as open_store
from store.log.record import Draft as Draft
from store.log.record import Message as _StoredMessage
from store.log.record import has_separator as _has_property_separator
from store.log.record import offset_msg_id as offset_msg_id
from store.log.recovery import RecoveryReport as RecoveryReport
from store.log.results import BatchResult as BatchResult
from store.log.results import PullResult as PullResult
from store.log.results import PutResult as PutResult
from store.log.retention import CleanPlan as CleanPlan
from store.log.retention import FileAction as FileAction
from store.log.schedule import parse_delay as parse_delay
from store.log.settings import LARGEST_MESSAGE_SIZE as LARGEST_MESSAGE_SIZE
from store.log.settings import MAX_SEGMENT_SIZE as MAX_SEGMENT_SIZE
from store.log.settings import StoreSettings as StoreSettings
from store.names import is_system_topic as is_system_topic
from store.names import parse_tag_expression as parse_tag_expression
from store.names import topic_kind as topic_kind
from store.names import validate_any_topic as validate_any_topic
from store.names import validate_client_id as validate_client_id
from store.names import validate_consumable_topic as validate_consumable_topic
from store.names import validate_group as validate_group
from store.names import validate_topic as validate_topic
from store.spark.staging import StagingDir as StagingDir
from store.timeparse import DURATION_HELP as DURATION_HELP
from store.timeparse import format_age as format_age
from store.timeparse import format_local as format_local
from store.timeparse import format_time as format_time
from store.timeparse import parse_duration as parse_duration
from store.timeparse import parse_time as parse_time
from store.timeparse import time_note as time_note
from store.tx.aio_producer import AsyncTransactionProducer as AsyncTransactionProducer
from store.tx.check import CheckEvent as _TransactionCheckEvent
from store.tx.check import CheckReport as _TransactionCheckReport
from store.tx.check import Pending as _PendingTransaction
from store.tx.producer import TransactionProducer as TransactionProducer
from store.tx.producer import TransactionSendResult as TransactionSendResult
from store.tx.producer import TxState as TxState
from store.tx.transaction import EndResult as _TransactionEnd
from store.tx.transaction import HalfResult as _PreparedTransaction

ConsumerRuntime = _ConsumerRuntime
PendingTransaction = _PendingTransaction
PreparedTransaction = _PreparedTransaction
StoredMessage = _StoredMessage
TransactionCheckEvent = _TransactionCheckEvent
TransactionCheckReport = _TransactionCheckReport
TransactionEnd = _TransactionEnd
has_property_separator = _has_property_separator
message_timeline = _message_timeline
