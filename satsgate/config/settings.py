"""Settings: one frozen object, built from defaults < config file < environment < arguments.

The config file is TOML with the same keys as :class:`Settings` (``[providers.NAME]``
tables and ``[engines]`` routes: satsgate/engines/config.py). Environment variables are
``SATSGATE_<KEY>`` in upper case.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from satsgate.config.cashu import parse_config
from satsgate.config.secret_file import read_or_create_secret

BACKENDS = ("dev", "cln", "lnd")


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8402
    data_dir: Path = Path("./satsgate-data")
    # The store in PostgreSQL (``postgresql://user@host/db``; in the config file
    # ``[store] url = ...``): several instances may share it (docs/scale.md). Empty: the
    # SQLite file in data_dir.
    store_url: str = ""
    # Several instances on one PostgreSQL store (docs/scale.md): an instance whose
    # heartbeat is older than this is gone, and its work is taken up by another.
    instance_lease_s: float = 30.0
    # Where paid results are kept (signed file URLs). Empty: <data_dir>/files. Several
    # instances must name one directory they all reach (a shared mount), so a URL one
    # instance issued downloads from any other (in the config file ``[files] dir``).
    files_dir_shared: str = ""
    # Public address used in poll URLs, checkout links and LNURL callbacks.
    # Empty: derived from host and port.
    base_url: str = ""
    # Several instances (docs/scale.md): this instance's own public address, where a
    # telephony provider reaches the calls this instance dialed (a voice bridge's media
    # WebSocket and status callbacks, a Telnyx call's events, a long Twilio message's
    # TwiML: they live in its memory). Empty: base_url.
    instance_base_url: str = ""
    backend: str = "dev"
    network: str = "regtest"
    cln_rpc: str = ""
    # LND (--backend lnd): gRPC address, the node's tls.cert and a macaroon file.
    lnd_grpc: str = ""
    lnd_tls_cert: str = ""
    lnd_macaroon: str = ""
    # Charge only on success (LND only): payments of the paymentId flow (MCP) use hold
    # invoices, settled after the call succeeded and canceled otherwise (no refund step).
    hold_invoices: bool = False
    # A held payment nobody uses is canceled (given back) after this long.
    hold_max_unused_s: int = 600
    # How long an invoice (and so a 402 challenge) may be paid.
    invoice_expiry_s: int = 600
    # How long a paid, unspent credential may still be used.
    credential_ttl_s: int = 24 * 3600
    # The spec's dedup window for repeated requests with one credential.
    dedup_window_s: int = 30
    # The free-retry window after an upstream content refusal (CONTENT_FILTERED_RETRY):
    # retries accepted this long after the latest refusal, and how many free retries
    # follow the first call (the refusal of the last one is refunded in full).
    rework_window_s: float = 600.0
    rework_retries_max: int = 3
    # Refund links (LNURL-withdraw) stay claimable this long.
    refund_ttl_s: int = 30 * 24 * 3600
    # Routing fee cap for every payout the node makes (refund links, Lightning-address
    # refunds of deposits, session balances): max(refund_fee_min_msat, ppm of the
    # amount), but at most refund_fee_max_pct percent of it (a 1-sat refund may spend at
    # most 0.5 sat on fees) and never more than refund_fee_max_msat (the payer names the
    # payout invoice and may route it through its own last hop: what it can collect per
    # payout is bounded by a few sats, not by a share of a large balance).
    refund_fee_ppm: int = 5_000
    refund_fee_min_msat: int = 5_000
    refund_fee_max_pct: int = 50
    refund_fee_max_msat: int = 50_000
    # ... and all payouts of one UTC day together at most this much (satsgate/payouts/fees.py):
    # a payer cycling its own money through refunds or sessions collects at most this a
    # day however many payouts it starts; once spent, payouts take zero-fee routes only
    # (a direct channel) until the next day, the others are retried.
    payout_fee_budget_msat: int = 5_000_000
    refund_pay_timeout_s: int = 60
    # Lightning-address payouts (satsgate/payouts/deposits.py) resolve name@domain at
    # https://domain/.well-known/lnurlp/name. Off the main network only, a domain may be
    # sent to another base URL here instead ({"wallet.test": "http://127.0.0.1:9000"}),
    # for a regtest wallet or a test's LNURL server.
    lightning_address_hosts: Mapping[str, str] = field(default_factory=dict)
    # Payment sessions (the MPP session intent, lightning method; payments/sessions.py):
    # a session's deposit is this many times the price of the call whose 402 offered it,
    # at most session_max_deposit_sat (never below that one call's price); a session idle
    # this long is closed and its balance paid to its return invoice.
    session_deposit_multiplier: int = 20
    session_max_deposit_sat: int = 100_000
    session_idle_timeout_s: int = 300
    # A CPU engine job (a card render, a PDF) is stopped after this long and refunded.
    cpu_job_time_limit_s: float = 120.0
    # Worker processes for CPU-bound engines (rendering, PDF, OCR, speech); long jobs hold
    # at most cpu_workers - 1 of them, so short ones always find one.
    cpu_workers: int = 2
    # Where CPU jobs run: "pool", this process's own pool (the default), or "queue",
    # ``satsgate worker`` processes through the store's queue (needs the store in
    # PostgreSQL; config file ``[workers] mode``, docs/scale.md "Workers"). A queued job
    # waits for a worker at most workers_queue_wait_s (0: the CPU time limit), then fails
    # and is refunded.
    workers_mode: str = "pool"
    workers_queue_wait_s: float = 0.0
    # Signed output-file URLs stay valid this long.
    file_url_ttl_s: int = 6 * 3600
    # The most bytes one paid call may store as output files (satsgate/files.py), by the
    # kind of output; past it nothing is stored and the call is refunded (INVALID_INPUT).
    # output_caps_by_service ({"convert-file": 100_000_000}, config file only) sets one
    # service's cap for all its outputs instead.
    max_output_image_bytes: int = 64 * 1024 * 1024
    max_output_audio_bytes: int = 512 * 1024 * 1024
    max_output_video_bytes: int = 512 * 1024 * 1024
    max_output_document_bytes: int = 256 * 1024 * 1024
    output_caps_by_service: Mapping[str, int] = field(default_factory=dict)
    # Largest accepted request body. Per-service limits are checked on top.
    max_body_bytes: int = 64 * 1024 * 1024
    # Secret for MPP challenge ids and file URL signatures; generated and kept
    # in the data dir when empty.
    server_secret: str = ""
    # Extra browser origins allowed to call POST /api/mcp (its own and loopback always are).
    mcp_allowed_origins: tuple[str, ...] = ()
    # Slow clients and connection floods (satsgate/edge/connection_guard.py). A request's head
    # must arrive within header_timeout_s of the connection opening or of its first byte;
    # its body within body_timeout_s of the head; an idle keep-alive connection is
    # closed after keepalive_timeout_s. 0 turns a timeout off (keep-alive: aiohttp's 3630 s).
    header_timeout_s: float = 15.0
    body_timeout_s: float = 120.0
    keepalive_timeout_s: float = 15.0
    # Open connections: in total, and per client address (an IPv6 client is its /64;
    # trusted proxies are exempt from the per-client cap). 0: no cap.
    max_connections: int = 1024
    max_connections_per_client: int = 64
    # Requests per minute per client address (satsgate/edge/ratelimit.py); 0 turns one off.
    # Unpaid challenges (a 402 with a new invoice, HTTP or MCP create_payment); paid calls
    # carrying a credential are never limited.
    challenge_rate_per_min: int = 100
    # Refund requests (POST /api/l402/refund, MCP request_refund).
    refund_rate_per_min: int = 30
    # Price estimates (GET /api/estimate-cost).
    estimate_rate_per_min: int = 300
    # Unpaid, unexpired invoices outstanding on the whole node, from any address (calls'
    # challenges and the session deposits offered with them); past it a new challenge
    # gets 429 RATE_LIMITED with Retry-After before any invoice. Bounds the payments
    # table and the node's invoices under a flood from many addresses. 0: off.
    max_unpaid_challenges: int = 10_000
    # An unpaid payment is deleted this long after its invoice expired (it can no longer
    # be paid; the margin lets a settlement learned late, after downtime, find its row).
    unpaid_retention_s: int = 3600
    # Reverse proxies whose X-Forwarded-For names the client (addresses or CIDRs). Empty:
    # X-Forwarded-For is ignored and the peer address is the client.
    trusted_proxies: tuple[str, ...] = ()
    # Wallet passes (boardingpass-wallet): the operator's Apple Pass Type ID certificate
    # (PEM or DER with pass_key; or a .p12 / .pfx holding both), Apple's WWDR intermediate
    # certificate, and the name shown on passes. All empty: passes are built unsigned, and
    # the result says so. The key's password: SATSGATE_PASS_KEY_PASSWORD.
    # (satsgate/engines/local/pkpass.py)
    pass_certificate: str = ""
    pass_key: str = ""
    pass_key_password: str = field(default="", repr=False)
    pass_wwdr_certificate: str = ""
    pass_organization_name: str = ""
    # [providers.NAME] tables and [engines] routes (engine name -> provider NAME or a
    # list of them, plus price_source): see satsgate/engines/config.py. Not in repr: the
    # tables hold API keys.
    providers: Mapping[str, Any] = field(default_factory=dict, repr=False)
    engines: Mapping[str, Any] = field(default_factory=dict)
    # [telephony] rates_file = "rates.csv": the operator's destination rates replacing the
    # built-in table (satsgate/domain/telephony.py), checked at start-up.
    telephony: Mapping[str, Any] = field(default_factory=dict)
    # [screening] of communications (satsgate/outreach/screener.py): llm (bool),
    # llm_on_error ("pass" or "hold"), llm_model (a text model id).
    screening: Mapping[str, Any] = field(default_factory=dict)
    # [discovery.nostr]: Nostr kind 31402 announcements (satsgate/config/nostr.py).
    discovery: Mapping[str, Any] = field(default_factory=dict)
    # [cashu]: Cashu ecash payments (NUT-24): mints, melt schedule. See
    # satsgate/config/cashu.py (CashuConfig); empty or no mints: off.
    cashu: Mapping[str, Any] = field(default_factory=dict)

    @property
    def public_base_url(self) -> str:
        if self.base_url:
            return self.base_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def own_base_url(self) -> str:
        """Where a provider reaches this very instance (``instance_base_url``; the shared
        address when it has none): for what lives in its memory, such as a call it dialed."""
        return self.instance_base_url.rstrip("/") or self.public_base_url

    @property
    def db_path(self) -> Path:
        return self.data_dir / "satsgate.sqlite3"

    @property
    def files_dir(self) -> Path:
        if self.files_dir_shared:
            return Path(self.files_dir_shared).expanduser()
        return self.data_dir / "files"


# Config-file tables whose keys are settings of their own: [table] key -> the setting.
_CONFIG_TABLES = {
    "store": {"url": "store_url"},
    "files": {"dir": "files_dir_shared"},
    "workers": {"mode": "workers_mode", "queue_wait_s": "workers_queue_wait_s"},
}

_INT_FIELDS = {f.name for f in dataclasses.fields(Settings) if f.type in ("int", int)}
_FLOAT_FIELDS = {f.name for f in dataclasses.fields(Settings) if f.type in ("float", float)}
_BOOL_FIELDS = {f.name for f in dataclasses.fields(Settings) if f.type in ("bool", bool)}


def _coerce(name: str, value: Any) -> Any:
    if name == "data_dir":
        return Path(value).expanduser()
    if name in ("mcp_allowed_origins", "trusted_proxies"):
        items = value.split(",") if isinstance(value, str) else value
        return tuple(str(item).strip() for item in items if str(item).strip())
    if name in _BOOL_FIELDS:
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(f"{name} must be true or false, not {value!r}")
            return lowered in ("1", "true", "yes", "on")
        return bool(value)
    if name in _INT_FIELDS:
        return int(value)
    if name in _FLOAT_FIELDS:
        return float(value)
    return value


def load_settings(
    config_file: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build Settings; unknown keys are an error so a typo never passes silently."""
    names = {f.name for f in dataclasses.fields(Settings)}
    values: dict[str, Any] = {}
    if config_file:
        with open(config_file, "rb") as fh:
            data = tomllib.load(fh)
        for table, keys in _CONFIG_TABLES.items():
            section = data.pop(table, None)
            if section is None:
                continue
            if not isinstance(section, dict) or set(section) - set(keys):
                raise ValueError(f"[{table}] in {config_file} takes only {' and '.join(keys)}")
            data.update({keys[key]: value for key, value in section.items()})
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown settings in {config_file}: {', '.join(sorted(unknown))}")
        values.update(data)
    env = os.environ if environ is None else environ
    tables = {"engines", "providers", "screening", "telephony", "discovery", "cashu"}
    for name in names - tables - {"output_caps_by_service"}:
        key = f"SATSGATE_{name.upper()}"
        if key in env:
            values[name] = env[key]
    for name, value in (overrides or {}).items():
        if name not in names:
            raise ValueError(f"unknown setting {name}")
        if value is not None:
            values[name] = value
    settings = Settings(**{k: _coerce(k, v) for k, v in values.items()})
    if settings.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}")
    if settings.hold_invoices and settings.backend != "lnd":
        raise ValueError("hold_invoices needs the LND backend (--backend lnd)")
    check_base_url(settings.base_url)
    check_base_url(settings.instance_base_url)
    if settings.store_url and not settings.store_url.startswith(("postgresql://", "postgres://")):
        raise ValueError("store url must be a postgresql:// URL")
    if settings.workers_mode not in ("pool", "queue"):
        raise ValueError(f'workers mode must be "pool" or "queue", not {settings.workers_mode!r}')
    if settings.workers_mode == "queue" and not settings.store_url:
        raise ValueError('workers mode "queue" needs the store in PostgreSQL ([store] url)')
    if settings.workers_queue_wait_s < 0:
        raise ValueError("workers queue_wait_s must not be negative")
    check_output_caps(settings)
    check_telephony(settings.telephony)
    from satsgate.config.nostr import NostrConfig

    NostrConfig.from_discovery(settings.discovery)  # a bad [discovery.nostr] stops here
    if settings.cashu:
        parse_config(settings.cashu)  # a typo or a bad mint URL fails here, at start
    for name in ("refund_fee_ppm", "refund_fee_min_msat", "refund_fee_max_pct"):
        if getattr(settings, name) < 0:
            raise ValueError(f"{name} must not be negative")
    for name in ("refund_fee_max_msat", "payout_fee_budget_msat"):
        if getattr(settings, name) < 0:
            raise ValueError(f"{name} must not be negative")
    for proxy in settings.trusted_proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise ValueError(f"trusted_proxies: {proxy!r} is not an address or CIDR") from None
    return settings


def check_output_caps(settings: Settings) -> None:
    """Every output cap is a positive number of bytes (ValueError otherwise)."""
    caps = {f"max_output_{kind}_bytes": cap for kind, cap in output_caps(settings).items()}
    table = settings.output_caps_by_service
    if not isinstance(table, Mapping):
        raise ValueError("output_caps_by_service must be a table of service = bytes")
    caps.update({f"output_caps_by_service.{slug}": cap for slug, cap in table.items()})
    for name, cap in caps.items():
        if isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0:
            raise ValueError(f"{name} must be a positive number of bytes, not {cap!r}")


def output_caps(settings: Settings) -> dict[str, int]:
    """The output caps by kind of output (satsgate/files.py OutputCaps.by_kind)."""
    return {
        "image": settings.max_output_image_bytes,
        "audio": settings.max_output_audio_bytes,
        "video": settings.max_output_video_bytes,
        "document": settings.max_output_document_bytes,
    }


def check_telephony(table: Mapping[str, Any]) -> None:
    """``[telephony]``: only ``rates_file``, a readable rates CSV (ValueError otherwise)."""
    if not isinstance(table, Mapping):
        raise ValueError("[telephony] must be a table")
    unknown = set(table) - {"rates_file"}
    if unknown:
        raise ValueError(f"unknown settings in [telephony]: {', '.join(sorted(unknown))}")
    path = table.get("rates_file")
    if path is not None:
        if not isinstance(path, str) or not path:
            raise ValueError("[telephony] rates_file must be a file path")
        from satsgate.domain.telephony import load_rates_file

        load_rates_file(Path(path).expanduser())


def check_base_url(value: str) -> None:
    """The public address must be an http(s) URL with a host and nothing after it that
    links could not carry; ValueError says what is wrong."""
    if not value:
        return
    parsed = urlsplit(value)
    if (
        parsed.scheme not in ("http", "https")
        or not parsed.hostname
        or parsed.query
        or parsed.fragment
        or any(ch.isspace() for ch in value)
    ):
        hint = ""
        if "#" in value or " " in value:
            hint = (
                " (Core Lightning keeps a trailing '# comment' as part of an option's value: "
                "put comments on a line of their own)"
            )
        raise ValueError(
            f"base_url must be an http:// or https:// address such as "
            f"https://pay.example.com, not {value!r}{hint}"
        )


def ensure_server_secret(settings: Settings) -> Settings:
    """Return settings with a server secret, creating ``<data_dir>/server_secret`` once."""
    if settings.server_secret:
        return settings
    secret = read_or_create_secret(
        settings.data_dir / "server_secret", lambda: secrets.token_hex(32)
    )
    return dataclasses.replace(settings, server_secret=secret)
