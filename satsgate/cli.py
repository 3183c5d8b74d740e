"""The `satsgate` command: serve (dev node, or beside a Core Lightning or LND node), and list
the engines this node can sell."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from satsgate.backends import BackendConfigError, make_backend
from satsgate.cluster.presence import MisconfiguredInstance, StoreInUse
from satsgate.config.settings import Settings, load_settings
from satsgate.engines import CpuRunner, EngineConfigError
from satsgate.lightning.backend import BackendError, LightningBackend
from satsgate.procguard import private_umask
from satsgate.server import eventloop
from satsgate.server.log_levels import quiet_library_logs

if TYPE_CHECKING:
    from satsgate.store import Store


def build_backend(settings: Settings) -> LightningBackend:
    """The configured backend; exits with the reason when there is none."""
    try:
        return make_backend(settings)
    except BackendConfigError as exc:
        raise SystemExit(str(exc)) from None


async def _serve(settings: Settings) -> None:
    from satsgate.appkeys import PRESENCE
    from satsgate.server.runner import freeze_startup_heap, start_service

    handle = await start_service(settings, build_backend(settings))
    freeze_startup_heap()
    logging.getLogger("satsgate").info(
        "satsgate listening on %s (backend %s, network %s, data %s)",
        handle.url,
        settings.backend,
        settings.network,
        settings.data_dir,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # Declared gone by another instance (it could not reach the store for a lease): its
    # work is taken up there, so this process stops; its supervisor starts a new one.
    fenced = handle.app[PRESENCE].fenced
    waits = [asyncio.create_task(stop.wait()), asyncio.create_task(fenced.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
        await handle.stop()
    if fenced.is_set():
        raise SystemExit(1)


def engines_report(settings: Settings) -> str:
    """Every engine name, available or not, with its source and the reason: what
    ``satsgate engines`` prints. Operator-facing, so provider names are shown."""
    from concurrent.futures import ThreadPoolExecutor

    from satsgate.server.app import node_engines
    from satsgate.services.registry import SERVICES

    with ThreadPoolExecutor(max_workers=1) as pool:  # nothing runs: statuses only
        engines = node_engines(settings, CpuRunner(pool, settings.cpu_job_time_limit_s))
    lines = []
    for status in engines.statuses():
        slugs = ", ".join(s.slug for s in SERVICES if s.engine == status.name) or "-"
        state = "available" if status.available else "unavailable"
        what = status.label if status.available else status.reason
        lines.append(f"{status.name:<18} {state:<12} {what}\n{'':<18} services: {slugs}")
    return "\n".join(lines)


async def _open_store(settings: Settings) -> Store:
    """The store the settings name, opened; the command ends when there is none."""
    from satsgate.store import Store

    if not settings.store_url and not settings.db_path.exists():
        raise SystemExit(f"no satsgate database at {settings.db_path} (check --data-dir)")
    store = Store(settings.db_path, settings.store_url)
    await store.open()
    return store


async def _ledger(settings: Settings, as_json: bool) -> str:
    import json

    from satsgate.operator import ledger_text

    store = await _open_store(settings)
    try:
        report = await store.ledger.report()
        report["refund_payouts"] = await store.refunds.payout_problems()
        report["session_payouts"] = await store.sessions.payout_problems()
    finally:
        await store.close()
    return json.dumps(report, indent=2) if as_json else ledger_text(report)


def _operator_call(settings: Settings, method: str, path: str, body: Any = None) -> Any:
    """One call of the running server's operator API (the token from the data dir)."""
    import httpx

    from satsgate.operator import ensure_operator_token, token_path

    if not token_path(settings.data_dir).exists():
        raise SystemExit(f"no operator token in {settings.data_dir} (check --data-dir)")
    token = ensure_operator_token(settings.data_dir)
    url = f"http://{settings.host if settings.host not in ('0.0.0.0', '::', '') else '127.0.0.1'}"
    url += f":{settings.port}{path}"
    try:
        resp = httpx.request(
            method,
            url,
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        )
    except httpx.HTTPError as exc:
        raise SystemExit(f"satsgate is not reachable at {url}: {exc}") from None
    data = resp.json()
    if resp.status_code >= 400:
        raise SystemExit(str(data.get("error") or data.get("message") or data))
    return data


def _hold_command(settings: Settings, action: str, target: str | None) -> str:
    import json
    from urllib.parse import quote

    if action == "list":
        holds = _operator_call(settings, "GET", "/api/operator/holds")["holds"]
        lines = [
            f"{h['hold_id']}  {h['status']:<16} {h['service']:<12}"
            f" {h['amount_msat'] // 1000:>6} sat  {', '.join(h['reasons'])}"
            for h in holds
        ]
        return "\n".join(lines) or "no held requests"
    if action in ("release", "refund"):
        if not target:
            raise SystemExit(f"usage: satsgate hold {action} HOLD_ID")
        path = f"/api/operator/holds/{quote(target, safe='')}/{action}"
        return json.dumps(_operator_call(settings, "POST", path), indent=2)
    if action == "dnc-list":
        entries = _operator_call(settings, "GET", "/api/operator/do-not-contact")["entries"]
        return "\n".join(f"{e['address']}  {e['source']}" for e in entries) or "the list is empty"
    if not target:
        raise SystemExit(f"usage: satsgate hold {action} ADDRESS")
    if action == "dnc-add":
        data = _operator_call(settings, "POST", "/api/operator/do-not-contact", {"address": target})
    else:
        path = f"/api/operator/do-not-contact/{quote(target, safe='')}"
        data = _operator_call(settings, "DELETE", path)
    return json.dumps(data)


async def _announce(settings: Settings, print_only: bool) -> str:
    """The Nostr announcement as ``serve`` would sign it now: printed (--print), or sent
    once to each configured relay with what each answered."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from satsgate.config.nostr import NostrConfig
    from satsgate.discovery.describe import describe
    from satsgate.discovery.documents import Catalog
    from satsgate.nostr.keys import ensure_keys
    from satsgate.nostr.publisher import Announcer
    from satsgate.server.app import node_engines, telephony_destinations
    from satsgate.services.catalog.rates import Rates
    from satsgate.services.registry import SERVICES

    config = NostrConfig.from_discovery(settings.discovery)
    destinations = telephony_destinations(settings)
    with ThreadPoolExecutor(max_workers=1) as pool:  # nothing runs: statuses only
        cpu = CpuRunner(pool, settings.cpu_job_time_limit_s)
        engines = node_engines(settings, cpu, destinations=destinations)
    rates = Rates(destinations)  # the BTC rate book, as a running node takes it at start
    async with httpx.AsyncClient() as http:
        await rates.refresh(http, settings)
    book = rates.book
    catalog = Catalog(
        settings, SERVICES, tuple(describe(spec, settings, engines, book) for spec in SERVICES)
    )
    announcer = Announcer(
        settings=settings,
        config=config,
        keys=ensure_keys(settings.data_dir),
        catalog=lambda: catalog,
    )
    await announcer.sign_current("satsgate announce")
    if print_only:
        return json.dumps(json.loads(announcer.event_json), indent=2, ensure_ascii=False)
    if not config.relays:
        raise SystemExit("no relays: set [discovery.nostr] relays in the config file")
    import aiohttp

    lines = [f"event {announcer.event_id} by {announcer.npub}"]
    async with aiohttp.ClientSession() as session:
        for relay in config.relays:
            accepted, detail = await announcer._send(
                session, relay, announcer.event_id, announcer.event_json
            )
            lines.append(f"{relay}: {'accepted' if accepted else 'not accepted'} ({detail})")
    return "\n".join(lines)


def _worker_cli(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from satsgate.workers.worker import run_worker, worker_config

    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = _settings(parser, args, store_url=args.store_url)
    try:
        config = worker_config(settings, args.concurrency, args.engines)
    except ValueError as exc:
        parser.error(str(exc))
    with contextlib.suppress(KeyboardInterrupt):
        eventloop.run(run_worker(config))
    return 0


def _status_cli(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    settings = _settings(parser, args, data_dir=args.data_dir, store_url=args.store_url)
    _print(eventloop.run(_status(settings, args.json)))
    return 0


async def _status(settings: Settings, as_json: bool) -> str:
    """The instances sharing the store and their duties, then the CPU jobs' queue."""
    import json

    from satsgate.cluster.status import instances_state, instances_text
    from satsgate.workers.status import status_report

    store = await _open_store(settings)
    try:
        instances = await instances_state(store)
    finally:
        await store.close()
    queue = await status_report(settings, as_json)
    if as_json:
        return json.dumps({**instances, "cpu": json.loads(queue)}, indent=2)
    return instances_text(instances) + "\n" + queue


def _parser() -> argparse.ArgumentParser:
    """The command line: one sub-command each, the options they share defined once."""
    config = argparse.ArgumentParser(add_help=False)
    config.add_argument("--config", help="TOML settings file")
    data = argparse.ArgumentParser(add_help=False)
    data.add_argument(
        "--data-dir", help="where the database, keys and files live (default ./satsgate-data)"
    )
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "--store-url",
        help="a postgresql:// URL to keep the store in PostgreSQL (default: the SQLite "
        "file in the data dir; docs/scale.md)",
    )
    parser = argparse.ArgumentParser(prog="satsgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", parents=[config, data, store], help="run the HTTP and MCP service"
    )
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8402)")
    serve.add_argument("--base-url", help="public address used in links")
    serve.add_argument(
        "--backend",
        choices=("dev", "cln", "lnd"),
        help="the Lightning node: the built-in dev node (default), Core Lightning or LND",
    )
    serve.add_argument("--network", help="expected network (default regtest)")
    serve.add_argument("--cln-rpc", help="path to Core Lightning's lightning-rpc socket")
    serve.add_argument("--lnd-grpc", help="LND's gRPC address, HOST:PORT (e.g. 127.0.0.1:10009)")
    serve.add_argument("--lnd-tls-cert", help="path to LND's tls.cert")
    serve.add_argument("--lnd-macaroon", help="path to an LND macaroon file")
    serve.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING")
    sub.add_parser(
        "engines",
        parents=[config],
        help="list every engine: available or not, from which provider, and why",
    )
    ledger = sub.add_parser(
        "ledger",
        parents=[config, data, store],
        help="received = earned + refunded + held + open, per day and in total (msat)",
    )
    ledger.add_argument("--json", action="store_true", help="the full report as JSON")
    token = sub.add_parser(
        "operator-token",
        parents=[config, data],
        help="print the operator token for /operator (created if missing)",
    )
    token.add_argument(
        "--rotate",
        action="store_true",
        help="replace the token: the old one and every dashboard session end at once",
    )
    hold = sub.add_parser(
        "hold",
        parents=[config, data],
        help="held communications (list, release ID, refund ID) and the do-not-contact "
        "list (dnc-list, dnc-add ADDRESS, dnc-remove ADDRESS), through the running server",
    )
    hold.add_argument(
        "action", choices=("list", "release", "refund", "dnc-list", "dnc-add", "dnc-remove")
    )
    hold.add_argument("target", nargs="?", help="the hold id, or the number or address")
    hold.add_argument("--port", type=int, help="the running server's port (default 8402)")
    announce = sub.add_parser(
        "announce",
        parents=[config, data],
        help="the Nostr kind 31402 announcement: send it once, or --print it",
    )
    announce.add_argument("--base-url", help="public address used in links")
    announce.add_argument("--print", action="store_true", help="print the event, send nothing")
    worker = sub.add_parser(
        "worker",
        parents=[config, store],
        help="take CPU engine jobs from the store's queue in PostgreSQL (docs/scale.md)",
    )
    worker.add_argument("--concurrency", type=int, help="jobs at once (default: cpu_workers, 2)")
    worker.add_argument(
        "--engines", help="only these engines' jobs, e.g. ocr,tts,pdf (default: every one)"
    )
    worker.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING")
    status = sub.add_parser(
        "status",
        parents=[config, data, store],
        help="the CPU workers (last heartbeat), the queue's depth and its oldest job",
    )
    status.add_argument("--json", action="store_true", help="as JSON")
    return parser


def _print(text: str) -> None:
    """Print a report; a reader that stops early (``| head``) ends it quietly."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python would complain again when it flushes stdout at exit: point it at nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    command = _COMMANDS.get(args.command, _serve_command)
    return command(parser, args)


def _settings(
    parser: argparse.ArgumentParser, args: argparse.Namespace, **overrides: Any
) -> Settings:
    """The settings from the config file, the environment and these arguments; a bad
    file or value ends the command with its usage error."""
    try:
        return load_settings(args.config, overrides)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))


def _hold_cli(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    settings = _settings(parser, args, data_dir=args.data_dir, port=args.port)
    _print(_hold_command(settings, args.action, args.target))
    return 0


def _announce_cli(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    settings = _settings(parser, args, data_dir=args.data_dir, base_url=args.base_url)
    private_umask()  # the key file is created 0600 in any case
    _print(eventloop.run(_announce(settings, args.print)))
    return 0


def _ledger_cli(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    settings = _settings(parser, args, data_dir=args.data_dir, store_url=args.store_url)
    _print(eventloop.run(_ledger(settings, args.json)))
    return 0


def _operator_token_cli(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from satsgate.operator import ensure_operator_token, rotate_operator_token

    settings = _settings(parser, args, data_dir=args.data_dir)
    private_umask()
    if args.rotate:
        print(rotate_operator_token(settings.data_dir))
    else:
        print(ensure_operator_token(settings.data_dir))
    return 0


def _engines_cli(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    _print(engines_report(_settings(parser, args)))
    return 0


def _serve_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    private_umask()  # every file the server writes is 0600, its directories 0700
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    quiet_library_logs()  # before the libraries are imported: some log while importing
    settings = _settings(
        parser,
        args,
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        store_url=args.store_url,
        base_url=args.base_url,
        backend=args.backend,
        network=args.network,
        cln_rpc=args.cln_rpc,
        lnd_grpc=args.lnd_grpc,
        lnd_tls_cert=args.lnd_tls_cert,
        lnd_macaroon=args.lnd_macaroon,
    )
    try:
        with contextlib.suppress(KeyboardInterrupt):
            eventloop.run(_serve(settings))
    except EngineConfigError as exc:  # before listening: say what to fix, no traceback
        parser.error(str(exc))
    except (BackendError, StoreInUse, MisconfiguredInstance) as exc:
        # the node refused (network, macaroon, permissions, TLS), or this instance cannot
        # serve beside the others on its store
        raise SystemExit(f"satsgate serve: cannot start: {exc}") from None
    return 0


_Command = Callable[[argparse.ArgumentParser, argparse.Namespace], int]
# Each subcommand but serve (the default).
_COMMANDS: dict[str, _Command] = {
    "hold": _hold_cli,
    "announce": _announce_cli,
    "ledger": _ledger_cli,
    "operator-token": _operator_token_cli,
    "engines": _engines_cli,
    "worker": _worker_cli,
    "status": _status_cli,
}


if __name__ == "__main__":
    raise SystemExit(main())
