from satsgate.backends.lnd.proto import lightning_pb2 as _lightning_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class CancelInvoiceMsg(_message.Message):
    __slots__ = ("payment_hash",)
    PAYMENT_HASH_FIELD_NUMBER: _ClassVar[int]
    payment_hash: bytes
    def __init__(self, payment_hash: _Optional[bytes] = ...) -> None: ...

class CancelInvoiceResp(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AddHoldInvoiceRequest(_message.Message):
    __slots__ = ("memo", "hash", "value", "value_msat", "expiry", "cltv_expiry", "private")
    MEMO_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VALUE_MSAT_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_FIELD_NUMBER: _ClassVar[int]
    CLTV_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_FIELD_NUMBER: _ClassVar[int]
    memo: str
    hash: bytes
    value: int
    value_msat: int
    expiry: int
    cltv_expiry: int
    private: bool
    def __init__(self, memo: _Optional[str] = ..., hash: _Optional[bytes] = ..., value: _Optional[int] = ..., value_msat: _Optional[int] = ..., expiry: _Optional[int] = ..., cltv_expiry: _Optional[int] = ..., private: _Optional[bool] = ...) -> None: ...

class AddHoldInvoiceResp(_message.Message):
    __slots__ = ("payment_request", "add_index", "payment_addr")
    PAYMENT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    ADD_INDEX_FIELD_NUMBER: _ClassVar[int]
    PAYMENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    payment_request: str
    add_index: int
    payment_addr: bytes
    def __init__(self, payment_request: _Optional[str] = ..., add_index: _Optional[int] = ..., payment_addr: _Optional[bytes] = ...) -> None: ...

class SettleInvoiceMsg(_message.Message):
    __slots__ = ("preimage",)
    PREIMAGE_FIELD_NUMBER: _ClassVar[int]
    preimage: bytes
    def __init__(self, preimage: _Optional[bytes] = ...) -> None: ...

class SettleInvoiceResp(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SubscribeSingleInvoiceRequest(_message.Message):
    __slots__ = ("r_hash",)
    R_HASH_FIELD_NUMBER: _ClassVar[int]
    r_hash: bytes
    def __init__(self, r_hash: _Optional[bytes] = ...) -> None: ...
