"""A fake Core Lightning speaking the real wire: JSON-RPC on a unix socket, the plugin protocol.

- :class:`FakeNode`: invoices (real signed BOLT11) and payments, CLN field names and error codes.
- :class:`FakeLightningd`: a FakeNode served on ``<lightning-dir>/lightning-rpc``.
- :class:`PluginHost`: starts a plugin process and plays lightningd's side of the plugin protocol.
"""

from .node import FakeNode, RpcFailure
from .plugin_host import PluginCallError, PluginHost
from .server import FakeLightningd, apply_filter, running_lightningd

__all__ = [
    "FakeLightningd",
    "FakeNode",
    "PluginCallError",
    "PluginHost",
    "RpcFailure",
    "apply_filter",
    "running_lightningd",
]
