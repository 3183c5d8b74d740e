"""Core Lightning backend: :class:`ClnBackend` speaks lightningd's JSON-RPC socket."""

from .backend import LABEL_PREFIX, ClnBackend, normalize_network
from .rpc import ClnConnectionError, ClnRpcError

__all__ = ["LABEL_PREFIX", "ClnBackend", "ClnConnectionError", "ClnRpcError", "normalize_network"]
