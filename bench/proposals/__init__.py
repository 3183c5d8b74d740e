"""Prototypes of proposed satsgate changes, measured by the bench (never imported by satsgate)."""
