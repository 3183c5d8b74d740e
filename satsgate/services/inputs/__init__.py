"""Caller input checked before payment: params and fields, base64 files (URL checks are
satsgate.public_urls; file measurements and languages, satsgate.domain)."""
