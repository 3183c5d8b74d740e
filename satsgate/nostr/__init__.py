"""Being found without a URL: Nostr kind 31402 announcements of this node's services.

- :mod:`~satsgate.config.nostr`: ``[discovery.nostr]`` (relays, intervals, what counts as
  a price change);
- :mod:`~satsgate.nostr.keys`: the node's Nostr key, created once in the data directory;
- :mod:`~satsgate.nostr.announcement`: the event (tags and content) from the catalog and
  the OpenAPI document's schemas, signed by nostr-sdk;
- :mod:`~satsgate.nostr.publisher`: the background task that sends it to the relays
  (per relay: timeouts, backoff), at start, every 24 h and on a price change.

Importing this package loads nothing heavy: the config is read by ``load_settings``. The
announcer's state for the operator's page is ``satsgate.appkeys.NOSTR_STATUS``.
"""
