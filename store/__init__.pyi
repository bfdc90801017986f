"""The names ``store`` exports lazily (``_EXPORTS`` in ``__init__.py``), for type checkers.
Kept equal to ``_EXPORTS`` by ``tests/test_structure.py``."""

from store.client.admin import (
    Admin as Admin,
)
from store.client.admin import (
    LockRow as LockRow,
)
from store.client.admin import (
    MemberRow as MemberRow,
)
from store.client.admin import (
    ResetPlan as ResetPlan,
)
from store.client.consumer import (
    Consumer as Consumer,
)
from store.client.creation import (
    StoreCreation as StoreCreation,
)
from store.client.creation import (
    create_store as create_store,
)
from store.client.envelope import (
    envelope as envelope,
)
from store.client.history import (
    message_report as message_report,
)
from store.client.history import (
    timeline as message_timeline,
)
from store.client.message import (
    Message as Message,
)
from store.client.message import (
    SendResult as SendResult,
)
from store.client.paths import (
    resolve_store_path as resolve_store_path,
)
from store.client.producer import (
    Producer as Producer,
)
from store.client.properties import (
    build_properties as build_properties,
)
from store.client.propnames import (
    Prop as Prop,
)
from store.client.rules import (
    check_consume_options as check_consume_options,
)
from store.client.runtime import (
    ConsumeOptions as ConsumeOptions,
)
from store.client.runtime import (
    Outcome as Outcome,
)
from store.client.runtime import (
    Runtime as ConsumerRuntime,
)
from store.client.runtime import (
    default_broadcast_client_id as default_broadcast_client_id,
)
from store.errors import (
    BadInputError as BadInputError,
)
from store.errors import (
    ClientIdInUseError as ClientIdInUseError,
)
from store.errors import (
    ConflictError as ConflictError,
)
from store.errors import (
    CorruptionError as CorruptionError,
)
from store.errors import (
    DamageFoundError as DamageFoundError,
)
from store.errors import (
    DataError as DataError,
)
from store.errors import (
    GroupNotFoundError as GroupNotFoundError,
)
from store.errors import (
    HandlerError as HandlerError,
)
from store.errors import (
    InvalidNameError as InvalidNameError,
)
from store.errors import (
    InvalidPropertyError as InvalidPropertyError,
)
from store.errors import (
    LockHeldError as LockHeldError,
)
from store.errors import (
    MessageNotFoundError as MessageNotFoundError,
)
from store.errors import (
    MessageTooLargeError as MessageTooLargeError,
)
from store.errors import (
    NotFoundError as NotFoundError,
)
from store.errors import (
    OperationError as OperationError,
)
from store.errors import (
    StoreError as StoreError,
)
from store.errors import (
    StoreIOError as StoreIOError,
)
from store.errors import (
    StoreNotFoundError as StoreNotFoundError,
)
from store.errors import (
    TopicExistsError as TopicExistsError,
)
from store.errors import (
    TopicNotFoundError as TopicNotFoundError,
)
from store.errors import (
    TransactionNotFoundError as TransactionNotFoundError,
)
from store.errors import (
    TransactionStateError as TransactionStateError,
)
from store.errors import (
    UsageError as UsageError,
)
from store.log.broker import (
    Store as Store,
)
from store.log.broker import (
    open_store as open_store,
)
from store.log.check import (
    CheckReport as CheckReport,
)
from store.log.record import (
    Draft as Draft,
)
from store.log.record import (
    Message as StoredMessage,
)
from store.log.record import (
    has_separator as has_property_separator,
)
from store.log.record import (
    offset_msg_id as offset_msg_id,
)
from store.log.recovery import (
    RecoveryReport as RecoveryReport,
)
from store.log.results import (
    BatchResult as BatchResult,
)
from store.log.results import (
    PullResult as PullResult,
)
from store.log.results import (
    PutResult as PutResult,
)
from store.log.retention import (
    CleanPlan as CleanPlan,
)
from store.log.retention import (
    FileAction as FileAction,
)
from store.log.schedule import (
    parse_delay as parse_delay,
)
from store.log.settings import (
    LARGEST_MESSAGE_SIZE as LARGEST_MESSAGE_SIZE,
)
from store.log.settings import (
    MAX_SEGMENT_SIZE as MAX_SEGMENT_SIZE,
)
from store.log.settings import (
    StoreSettings as StoreSettings,
)
from store.names import (
    is_system_topic as is_system_topic,
)
from store.names import (
    parse_tag_expression as parse_tag_expression,
)
from store.names import (
    topic_kind as topic_kind,
)
from store.names import (
    validate_any_topic as validate_any_topic,
)
from store.names import (
    validate_client_id as validate_client_id,
)
from store.names import (
    validate_group as validate_group,
)
from store.names import (
    validate_topic as validate_topic,
)
from store.spark.staging import (
    StagingDir as StagingDir,
)
from store.timeparse import (
    DURATION_HELP as DURATION_HELP,
)
from store.timeparse import (
    format_age as format_age,
)
from store.timeparse import (
    format_local as format_local,
)
from store.timeparse import (
    format_time as format_time,
)
from store.timeparse import (
    parse_duration as parse_duration,
)
from store.timeparse import (
    parse_time as parse_time,
)
from store.tx.check import (
    CheckEvent as TransactionCheckEvent,
)
from store.tx.check import (
    CheckReport as TransactionCheckReport,
)
from store.tx.check import (
    Pending as PendingTransaction,
)
from store.tx.producer import (
    TransactionProducer as TransactionProducer,
)
from store.tx.producer import (
    TransactionSendResult as TransactionSendResult,
)
from store.tx.producer import (
    TxState as TxState,
)
from store.tx.transaction import (
    EndResult as TransactionEnd,
)
from store.tx.transaction import (
    HalfResult as PreparedTransaction,
)

__all__ = [
    "Admin",
    "BadInputError",
    "BatchResult",
    "CheckReport",
    "CleanPlan",
    "ClientIdInUseError",
    "ConflictError",
    "ConsumeOptions",
    "Consumer",
    "ConsumerRuntime",
    "CorruptionError",
    "DURATION_HELP",
    "DamageFoundError",
    "DataError",
    "Draft",
    "FileAction",
    "GroupNotFoundError",
    "HandlerError",
    "InvalidNameError",
    "InvalidPropertyError",
    "LARGEST_MESSAGE_SIZE",
    "LockHeldError",
    "LockRow",
    "MAX_SEGMENT_SIZE",
    "MemberRow",
    "Message",
    "MessageNotFoundError",
    "MessageTooLargeError",
    "NotFoundError",
    "OperationError",
    "Outcome",
    "PendingTransaction",
    "PreparedTransaction",
    "Producer",
    "Prop",
    "PullResult",
    "PutResult",
    "RecoveryReport",
    "ResetPlan",
    "SendResult",
    "StagingDir",
    "Store",
    "StoreCreation",
    "StoreError",
    "StoreIOError",
    "StoreNotFoundError",
    "StoreSettings",
    "StoredMessage",
    "TopicExistsError",
    "TopicNotFoundError",
    "TransactionCheckEvent",
    "TransactionCheckReport",
    "TransactionEnd",
    "TransactionNotFoundError",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionStateError",
    "TxState",
    "UsageError",
    "build_properties",
    "check_consume_options",
    "create_store",
    "default_broadcast_client_id",
    "envelope",
    "format_age",
    "format_local",
    "format_time",
    "has_property_separator",
    "is_system_topic",
    "message_report",
    "message_timeline",
    "offset_msg_id",
    "open_store",
    "parse_delay",
    "parse_duration",
    "parse_tag_expression",
    "parse_time",
    "resolve_store_path",
    "topic_kind",
    "validate_any_topic",
    "validate_client_id",
    "validate_group",
    "validate_topic",
]
