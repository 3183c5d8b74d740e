"""The operator's configuration: :mod:`~satsgate.config.settings` (the one frozen
Settings object, from defaults, the TOML file, the environment and the arguments), and
the tables it checks at start that their own packages read later: ``[cashu]``
(:mod:`~satsgate.config.cashu`) and ``[discovery.nostr]`` (:mod:`~satsgate.config.nostr`).
They import nothing of satsgate, so every layer may read them."""
