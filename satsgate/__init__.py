"""satsgate: pay-per-call AI and communication services inside a Lightning node."""

__version__ = "0.1.0"
