from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InvoiceHTLCState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACCEPTED: _ClassVar[InvoiceHTLCState]
    SETTLED: _ClassVar[InvoiceHTLCState]
    CANCELED: _ClassVar[InvoiceHTLCState]

class PaymentFailureReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_REASON_NONE: _ClassVar[PaymentFailureReason]
    FAILURE_REASON_TIMEOUT: _ClassVar[PaymentFailureReason]
    FAILURE_REASON_NO_ROUTE: _ClassVar[PaymentFailureReason]
    FAILURE_REASON_ERROR: _ClassVar[PaymentFailureReason]
    FAILURE_REASON_INCORRECT_PAYMENT_DETAILS: _ClassVar[PaymentFailureReason]
    FAILURE_REASON_INSUFFICIENT_BALANCE: _ClassVar[PaymentFailureReason]
    FAILURE_REASON_CANCELED: _ClassVar[PaymentFailureReason]
ACCEPTED: InvoiceHTLCState
SETTLED: InvoiceHTLCState
CANCELED: InvoiceHTLCState
FAILURE_REASON_NONE: PaymentFailureReason
FAILURE_REASON_TIMEOUT: PaymentFailureReason
FAILURE_REASON_NO_ROUTE: PaymentFailureReason
FAILURE_REASON_ERROR: PaymentFailureReason
FAILURE_REASON_INCORRECT_PAYMENT_DETAILS: PaymentFailureReason
FAILURE_REASON_INSUFFICIENT_BALANCE: PaymentFailureReason
FAILURE_REASON_CANCELED: PaymentFailureReason

class GetInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetInfoResponse(_message.Message):
    __slots__ = ("identity_pubkey", "alias", "block_height", "synced_to_chain", "version", "chains")
    IDENTITY_PUBKEY_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    SYNCED_TO_CHAIN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHAINS_FIELD_NUMBER: _ClassVar[int]
    identity_pubkey: str
    alias: str
    block_height: int
    synced_to_chain: bool
    version: str
    chains: _containers.RepeatedCompositeFieldContainer[Chain]
    def __init__(self, identity_pubkey: _Optional[str] = ..., alias: _Optional[str] = ..., block_height: _Optional[int] = ..., synced_to_chain: _Optional[bool] = ..., version: _Optional[str] = ..., chains: _Optional[_Iterable[_Union[Chain, _Mapping]]] = ...) -> None: ...

class Chain(_message.Message):
    __slots__ = ("chain", "network")
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    chain: str
    network: str
    def __init__(self, chain: _Optional[str] = ..., network: _Optional[str] = ...) -> None: ...

class Invoice(_message.Message):
    __slots__ = ("memo", "r_preimage", "r_hash", "value", "value_msat", "creation_date", "settle_date", "payment_request", "expiry", "cltv_expiry", "private", "add_index", "settle_index", "amt_paid_sat", "amt_paid_msat", "state", "htlcs", "payment_addr")
    class InvoiceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OPEN: _ClassVar[Invoice.InvoiceState]
        SETTLED: _ClassVar[Invoice.InvoiceState]
        CANCELED: _ClassVar[Invoice.InvoiceState]
        ACCEPTED: _ClassVar[Invoice.InvoiceState]
    OPEN: Invoice.InvoiceState
    SETTLED: Invoice.InvoiceState
    CANCELED: Invoice.InvoiceState
    ACCEPTED: Invoice.InvoiceState
    MEMO_FIELD_NUMBER: _ClassVar[int]
    R_PREIMAGE_FIELD_NUMBER: _ClassVar[int]
    R_HASH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUE_MSAT_FIELD_NUMBER: _ClassVar[int]
    CREATION_DATE_FIELD_NUMBER: _ClassVar[int]
    SETTLE_DATE_FIELD_NUMBER: _ClassVar[int]
    PAYMENT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_FIELD_NUMBER: _ClassVar[int]
    CLTV_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_FIELD_NUMBER: _ClassVar[int]
    ADD_INDEX_FIELD_NUMBER: _ClassVar[int]
    SETTLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    AMT_PAID_SAT_FIELD_NUMBER: _ClassVar[int]
    AMT_PAID_MSAT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HTLCS_FIELD_NUMBER: _ClassVar[int]
    PAYMENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    memo: str
    r_preimage: bytes
    r_hash: bytes
    value: int
    value_msat: int
    creation_date: int
    settle_date: int
    payment_request: str
    expiry: int
    cltv_expiry: int
    private: bool
    add_index: int
    settle_index: int
    amt_paid_sat: int
    amt_paid_msat: int
    state: Invoice.InvoiceState
    htlcs: _containers.RepeatedCompositeFieldContainer[InvoiceHTLC]
    payment_addr: bytes
    def __init__(self, memo: _Optional[str] = ..., r_preimage: _Optional[bytes] = ..., r_hash: _Optional[bytes] = ..., value: _Optional[int] = ..., value_msat: _Optional[int] = ..., creation_date: _Optional[int] = ..., settle_date: _Optional[int] = ..., payment_request: _Optional[str] = ..., expiry: _Optional[int] = ..., cltv_expiry: _Optional[int] = ..., private: _Optional[bool] = ..., add_index: _Optional[int] = ..., settle_index: _Optional[int] = ..., amt_paid_sat: _Optional[int] = ..., amt_paid_msat: _Optional[int] = ..., state: _Optional[_Union[Invoice.InvoiceState, str]] = ..., htlcs: _Optional[_Iterable[_Union[InvoiceHTLC, _Mapping]]] = ..., payment_addr: _Optional[bytes] = ...) -> None: ...

class InvoiceHTLC(_message.Message):
    __slots__ = ("chan_id", "htlc_index", "amt_msat", "accept_height", "accept_time", "resolve_time", "expiry_height", "state")
    CHAN_ID_FIELD_NUMBER: _ClassVar[int]
    HTLC_INDEX_FIELD_NUMBER: _ClassVar[int]
    AMT_MSAT_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_TIME_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    chan_id: int
    htlc_index: int
    amt_msat: int
    accept_height: int
    accept_time: int
    resolve_time: int
    expiry_height: int
    state: InvoiceHTLCState
    def __init__(self, chan_id: _Optional[int] = ..., htlc_index: _Optional[int] = ..., amt_msat: _Optional[int] = ..., accept_height: _Optional[int] = ..., accept_time: _Optional[int] = ..., resolve_time: _Optional[int] = ..., expiry_height: _Optional[int] = ..., state: _Optional[_Union[InvoiceHTLCState, str]] = ...) -> None: ...

class AddInvoiceResponse(_message.Message):
    __slots__ = ("r_hash", "payment_request", "add_index", "payment_addr")
    R_HASH_FIELD_NUMBER: _ClassVar[int]
    PAYMENT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    ADD_INDEX_FIELD_NUMBER: _ClassVar[int]
    PAYMENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    r_hash: bytes
    payment_request: str
    add_index: int
    payment_addr: bytes
    def __init__(self, r_hash: _Optional[bytes] = ..., payment_request: _Optional[str] = ..., add_index: _Optional[int] = ..., payment_addr: _Optional[bytes] = ...) -> None: ...

class PaymentHash(_message.Message):
    __slots__ = ("r_hash_str", "r_hash")
    R_HASH_STR_FIELD_NUMBER: _ClassVar[int]
    R_HASH_FIELD_NUMBER: _ClassVar[int]
    r_hash_str: str
    r_hash: bytes
    def __init__(self, r_hash_str: _Optional[str] = ..., r_hash: _Optional[bytes] = ...) -> None: ...

class ListInvoiceRequest(_message.Message):
    __slots__ = ("pending_only", "index_offset", "num_max_invoices", "reversed")
    PENDING_ONLY_FIELD_NUMBER: _ClassVar[int]
    INDEX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NUM_MAX_INVOICES_FIELD_NUMBER: _ClassVar[int]
    REVERSED_FIELD_NUMBER: _ClassVar[int]
    pending_only: bool
    index_offset: int
    num_max_invoices: int
    reversed: bool
    def __init__(self, pending_only: _Optional[bool] = ..., index_offset: _Optional[int] = ..., num_max_invoices: _Optional[int] = ..., reversed: _Optional[bool] = ...) -> None: ...

class ListInvoiceResponse(_message.Message):
    __slots__ = ("invoices", "last_index_offset", "first_index_offset")
    INVOICES_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    invoices: _containers.RepeatedCompositeFieldContainer[Invoice]
    last_index_offset: int
    first_index_offset: int
    def __init__(self, invoices: _Optional[_Iterable[_Union[Invoice, _Mapping]]] = ..., last_index_offset: _Optional[int] = ..., first_index_offset: _Optional[int] = ...) -> None: ...

class InvoiceSubscription(_message.Message):
    __slots__ = ("add_index", "settle_index")
    ADD_INDEX_FIELD_NUMBER: _ClassVar[int]
    SETTLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    add_index: int
    settle_index: int
    def __init__(self, add_index: _Optional[int] = ..., settle_index: _Optional[int] = ...) -> None: ...

class Payment(_message.Message):
    __slots__ = ("payment_hash", "payment_preimage", "value_sat", "value_msat", "payment_request", "status", "fee_sat", "fee_msat", "creation_time_ns", "payment_index", "failure_reason")
    class PaymentStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[Payment.PaymentStatus]
        IN_FLIGHT: _ClassVar[Payment.PaymentStatus]
        SUCCEEDED: _ClassVar[Payment.PaymentStatus]
        FAILED: _ClassVar[Payment.PaymentStatus]
        INITIATED: _ClassVar[Payment.PaymentStatus]
    UNKNOWN: Payment.PaymentStatus
    IN_FLIGHT: Payment.PaymentStatus
    SUCCEEDED: Payment.PaymentStatus
    FAILED: Payment.PaymentStatus
    INITIATED: Payment.PaymentStatus
    PAYMENT_HASH_FIELD_NUMBER: _ClassVar[int]
    PAYMENT_PREIMAGE_FIELD_NUMBER: _ClassVar[int]
    VALUE_SAT_FIELD_NUMBER: _ClassVar[int]
    VALUE_MSAT_FIELD_NUMBER: _ClassVar[int]
    PAYMENT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FEE_SAT_FIELD_NUMBER: _ClassVar[int]
    FEE_MSAT_FIELD_NUMBER: _ClassVar[int]
    CREATION_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    PAYMENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    payment_hash: str
    payment_preimage: str
    value_sat: int
    value_msat: int
    payment_request: str
    status: Payment.PaymentStatus
    fee_sat: int
    fee_msat: int
    creation_time_ns: int
    payment_index: int
    failure_reason: PaymentFailureReason
    def __init__(self, payment_hash: _Optional[str] = ..., payment_preimage: _Optional[str] = ..., value_sat: _Optional[int] = ..., value_msat: _Optional[int] = ..., payment_request: _Optional[str] = ..., status: _Optional[_Union[Payment.PaymentStatus, str]] = ..., fee_sat: _Optional[int] = ..., fee_msat: _Optional[int] = ..., creation_time_ns: _Optional[int] = ..., payment_index: _Optional[int] = ..., failure_reason: _Optional[_Union[PaymentFailureReason, str]] = ...) -> None: ...
