"""Core Lightning backend: :class:`ClnBackend` speaks lightningd's JSON-RPC socket."""

from .backend import LABEL_PREFIX, ClnBackend
from .rpc import ClnConnectionError, ClnRpcError

__all__ = ["LABEL_PREFIX", "ClnBackend", "ClnConnectionError", "ClnRpcError"]
