"""Caller input checked before payment: params and fields, base64 files, public URLs,
file measurements and languages."""
