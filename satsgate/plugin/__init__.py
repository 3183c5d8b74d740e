"""satsgate as a Core Lightning plugin: ``lightningd --plugin=<path to satsgate_plugin.py>``.

Run by lightningd as ``python -m satsgate.plugin``, the ``satsgate-plugin``
command, or the executable ``satsgate/plugin/satsgate_plugin.py``.
"""

from .cln_plugin import SatsgatePlugin, main

__all__ = ["SatsgatePlugin", "main"]
