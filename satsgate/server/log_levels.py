"""The log levels of the libraries satsgate runs on: set before any of them is imported,
since some log while being imported (WeasyPrint parses its stylesheets then)."""

from __future__ import annotations

import logging

# Libraries whose INFO and DEBUG records have no place in the service's log. The HTTP
# clients log every request's full URL at INFO (httpx; httpx2 under the AI SDKs) and their
# connection layers the host and port at DEBUG: a provider's URL can hold its account id,
# and no upstream address belongs in the log; a caller's URL is the caller's. APScheduler
# logs each interval job's every run, WeasyPrint each rendering step. Their warnings and
# errors (a job that raised, a stylesheet it could not read) still come through.
QUIET_LIBRARIES = ("httpx", "httpcore", "httpx2", "httpcore2", "apscheduler", "weasyprint")


def quiet_library_logs() -> None:
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
