from satsgate.backends.lnd.proto import lightning_pb2 as _lightning_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class SendPaymentRequest(_message.Message):
    __slots__ = ("payment_request", "amt_msat", "timeout_seconds", "fee_limit_msat", "no_inflight_updates")
    PAYMENT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    AMT_MSAT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FEE_LIMIT_MSAT_FIELD_NUMBER: _ClassVar[int]
    NO_INFLIGHT_UPDATES_FIELD_NUMBER: _ClassVar[int]
    payment_request: str
    amt_msat: int
    timeout_seconds: int
    fee_limit_msat: int
    no_inflight_updates: bool
    def __init__(self, payment_request: _Optional[str] = ..., amt_msat: _Optional[int] = ..., timeout_seconds: _Optional[int] = ..., fee_limit_msat: _Optional[int] = ..., no_inflight_updates: _Optional[bool] = ...) -> None: ...

class TrackPaymentRequest(_message.Message):
    __slots__ = ("payment_hash", "no_inflight_updates")
    PAYMENT_HASH_FIELD_NUMBER: _ClassVar[int]
    NO_INFLIGHT_UPDATES_FIELD_NUMBER: _ClassVar[int]
    payment_hash: bytes
    no_inflight_updates: bool
    def __init__(self, payment_hash: _Optional[bytes] = ..., no_inflight_updates: _Optional[bool] = ...) -> None: ...
