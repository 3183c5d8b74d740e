"""The app's typed AppKeys: application state lives under these, never in module globals."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import httpx
from aiohttp import web

from satsgate.cluster.events import ClusterEvents
from satsgate.cluster.presence import Presence
from satsgate.config.settings import Settings
from satsgate.engines import CpuRunner, Engines
from satsgate.files import FileStore
from satsgate.jobs.callbacks import CallbackSender
from satsgate.jobs.lifecycle import JobRunner
from satsgate.lightning.backend import LightningBackend
from satsgate.outreach.held_requests import HeldRequestDesk
from satsgate.outreach.screener import NodeScreener
from satsgate.payments.gate import Gate, HandlerResources
from satsgate.payouts.deposits import DepositSettler
from satsgate.payouts.refunds import RefundService
from satsgate.public_urls import Outbound
from satsgate.services.base import PrecheckMemo
from satsgate.services.catalog.rates import Rates
from satsgate.services.comms.ai_call_runner import AiCallRunner
from satsgate.services.comms.bridge_calls import BridgeCalls
from satsgate.services.comms.faxes import FaxDesk
from satsgate.services.documents.esign_desk import ESignDesk
from satsgate.store import Store

SETTINGS = web.AppKey("settings", Settings)
BACKEND = web.AppKey("backend", LightningBackend)
STORE = web.AppKey("store", Store)
GATE = web.AppKey("gate", Gate)
HANDLERS = web.AppKey("handlers", HandlerResources)  # what handlers' contexts hold
REFUNDS = web.AppKey("refunds", RefundService)
DEPOSITS = web.AppKey("deposits", DepositSettler)  # deposit settlement (AI call, bridge)
AI_CALLS = web.AppKey("ai_calls", AiCallRunner)  # AI calls in flight, confirm, poll, claims
FILES = web.AppKey("files", FileStore)
JOBS = web.AppKey("jobs", JobRunner)
ENGINES = web.AppKey("engines", Engines)
POOL = web.AppKey("cpu_pool", ProcessPoolExecutor)
HTTP = web.AppKey("http", httpx.AsyncClient)
STARTED_AT = web.AppKey("started_at", float)
VOICE_BRIDGE = web.AppKey("voice_bridge", BridgeCalls)  # voice-bridge sessions
# Communications held for review (issue 19).
HELD_REQUESTS = web.AppKey("held_requests", HeldRequestDesk)
OUTBOUND = web.AppKey("outbound", Outbound)  # callers' URLs: DNS, public addresses, CAs
CALLBACKS = web.AppKey("callbacks", CallbackSender)
CPU = web.AppKey("cpu", CpuRunner)  # the process pool's runner, shared by handlers and engines
ESIGN = web.AppKey("esign", ESignDesk)  # e-signature requests followed to their signed copy
RATES = web.AppKey("rates", Rates)  # the BTC rate book BTC-pegged prices are quoted at
PRECHECKS = web.AppKey("prechecks", PrecheckMemo)  # kept outcomes of checks before invoices
FAXES = web.AppKey("faxes", FaxDesk)  # sent faxes followed and settled, inbound numbers
# Events every instance on a PostgreSQL store hears (absent on SQLite).
CLUSTER_EVENTS = web.AppKey("cluster_events", ClusterEvents)
PRESENCE = web.AppKey("presence", Presence)  # this instance among those sharing the store
SCREENER = web.AppKey("screener", NodeScreener)  # the content screen of communications
# The Nostr announcer's state for the operator (npub, last event, each relay), when announcing.
NOSTR_STATUS: web.AppKey[Callable[[], dict[str, Any]]] = web.AppKey("nostr_status")
