"""The gate: L402 and MPP credentials, pricing, the spend rule, dedup."""
