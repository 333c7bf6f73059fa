"""The names ``runlane_sqs`` exports, each written once: type checkers read them here,
and ``__init__.py`` makes each one importable from its module on first use."""

from .api.app import (
    Runlane as Runlane,
)
from .api.runs import (
    PruneReport as PruneReport,
)
from .api.runs import (
    RunHistory as RunHistory,
)
from .api.runs import (
    RunPage as RunPage,
)
from .api.telemetry import (
    Telemetry as Telemetry,
)
from .api.transactions import (
    Transaction as Transaction,
)
from .core.attempts import (
    Attempt as Attempt,
)
from .core.batches import (
    Batch as Batch,
)
from .core.bulk import (
    BulkAction as BulkAction,
)
from .core.bulk import (
    BulkFilter as BulkFilter,
)
from .core.bulk import (
    BulkOperation as BulkOperation,
)
from .core.bulk import (
    OperationStatus as OperationStatus,
)
from .core.clock import (
    Clock as Clock,
)
from .core.clock import (
    ManualClock as ManualClock,
)
from .core.clock import (
    SystemClock as SystemClock,
)
from .core.config import (
    RunlaneConfig as RunlaneConfig,
)
from .core.config import (
    RunlaneSettings as RunlaneSettings,
)
from .core.debounce import (
    Debounce as Debounce,
)
from .core.errors import (
    CodecError as CodecError,
)
from .core.errors import (
    ConfigurationError as ConfigurationError,
)
from .core.errors import (
    ConflictError as ConflictError,
)
from .core.errors import (
    IllegalTransition as IllegalTransition,
)
from .core.errors import (
    InvalidKeyError as InvalidKeyError,
)
from .core.errors import (
    InvalidPayloadError as InvalidPayloadError,
)
from .core.errors import (
    InvalidTransaction as InvalidTransaction,
)
from .core.errors import (
    LeaseLost as LeaseLost,
)
from .core.errors import (
    MissingResourceError as MissingResourceError,
)
from .core.errors import (
    OperationNotFound as OperationNotFound,
)
from .core.errors import (
    PayloadTooLarge as PayloadTooLarge,
)
from .core.errors import (
    RunlaneError as RunlaneError,
)
from .core.errors import (
    RunNotFound as RunNotFound,
)
from .core.errors import (
    RunWaitTimedOut as RunWaitTimedOut,
)
from .core.errors import (
    ScheduleNotFound as ScheduleNotFound,
)
from .core.errors import (
    StepError as StepError,
)
from .core.errors import (
    StorageError as StorageError,
)
from .core.errors import (
    StorageUnavailable as StorageUnavailable,
)
from .core.errors import (
    TransactionCancelled as TransactionCancelled,
)
from .core.errors import (
    TransportError as TransportError,
)
from .core.errors import (
    UnknownTaskError as UnknownTaskError,
)
from .core.errors import (
    ValueUnreadable as ValueUnreadable,
)
from .core.groups import (
    ChildOutcome as ChildOutcome,
)
from .core.groups import (
    Group as Group,
)
from .core.groups import (
    GroupFailed as GroupFailed,
)
from .core.groups import (
    GroupResults as GroupResults,
)
from .core.groups import (
    GroupStatus as GroupStatus,
)
from .core.model import (
    EventType as EventType,
)
from .core.model import (
    Failure as Failure,
)
from .core.model import (
    Lease as Lease,
)
from .core.model import (
    LinkKind as LinkKind,
)
from .core.model import (
    Run as Run,
)
from .core.model import (
    RunEvent as RunEvent,
)
from .core.model import (
    RunStatus as RunStatus,
)
from .core.model import (
    Wait as Wait,
)
from .core.model import (
    WaitKind as WaitKind,
)
from .core.rates import (
    RateLimit as RateLimit,
)
from .core.retry import (
    Backoff as Backoff,
)
from .core.retry import (
    RetryPolicy as RetryPolicy,
)
from .core.schedule_state import (
    ScheduleState as ScheduleState,
)
from .core.schedule_state import (
    ScheduleStatus as ScheduleStatus,
)
from .core.schedules import (
    CatchUp as CatchUp,
)
from .core.schedules import (
    Schedule as Schedule,
)
from .core.schedules import (
    ScheduleKind as ScheduleKind,
)
from .core.tokens import (
    Token as Token,
)
from .core.tokens import (
    TokenAlreadyDecided as TokenAlreadyDecided,
)
from .core.tokens import (
    TokenNotFound as TokenNotFound,
)
from .core.tokens import (
    TokenResult as TokenResult,
)
from .core.tokens import (
    TokenStatus as TokenStatus,
)
from .core.values import (
    Reference as Reference,
)
from .core.values import (
    Sealed as Sealed,
)
from .engine.context import (
    GroupOptions as GroupOptions,
)
from .engine.context import (
    RunOutcome as RunOutcome,
)
from .engine.context import (
    SignalResult as SignalResult,
)
from .engine.context import (
    TaskContext as TaskContext,
)
from .engine.context import (
    WaitRequested as WaitRequested,
)
from .engine.hooks import (
    AttemptHooks as AttemptHooks,
)
from .engine.hooks import (
    AttemptOutcome as AttemptOutcome,
)
from .engine.tasks import (
    Queue as Queue,
)
from .engine.tasks import (
    Task as Task,
)
from .engine.tasks import (
    TaskOptions as TaskOptions,
)
from .engine.triggering import (
    TriggerManyOptions as TriggerManyOptions,
)
from .engine.triggering import (
    TriggerOptions as TriggerOptions,
)
from .runtime.worker import (
    Worker as Worker,
)
