"""The engine seam: configuration, resolution, fallback chains and model maps, and what
callers and operators see of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import httpx
import pytest

from satsgate.cli import engines_report
from satsgate.config.settings import Settings, load_settings
from satsgate.engines import (
    CpuRunner,
    EngineConfigError,
    EngineDeps,
    EngineError,
    Engines,
    LocalEngine,
    ProviderConfig,
    ProviderFactory,
    build_engines,
)
from satsgate.engines.config import parse_providers
from satsgate.services.registry import BY_SLUG, ENGINE_NAMES
from tests.conftest import ThreadedServer, make_settings, paid_l402_auth
from tests.engines_down import PROVIDER_KINDS as DOWN_KINDS
from tests.engines_down import down_engines
from tests.payments.test_gateway import assert_envelope, payment_count


class Echo(Protocol):
    async def echo(self, text: str, model: str | None) -> str: ...


class ScriptedProvider:
    """A provider whose every call answers from a script: a reply, or an EngineError."""

    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        self.config = config
        self.calls: list[tuple[str, str | None]] = []

    def engine(self, name: str) -> object | None:
        return self if name in ("text", "vision") else None

    async def echo(self, text: str, model: str | None) -> str:
        self.calls.append((text, model))
        failure = self.config.options.get("fail")
        if failure:
            raise EngineError(
                failure, "upstream refused", may_fall_back=self.config.options.get("may_fall_back")
            )
        return f"{self.config.name}:{model}:{text}"

    async def aclose(self) -> None:
        return None


KINDS: dict[str, ProviderFactory] = {"scripted": ScriptedProvider}


def build(settings: Settings, **kwargs: Any) -> Engines:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return build_engines(
            settings,
            ENGINE_NAMES,
            EngineDeps(settings, CpuRunner(pool, 1.0)),
            provider_kinds=kwargs.pop("kinds", KINDS),
            local_engines=kwargs.pop("local_engines", ()),
            **kwargs,
        )


def scripted(name: str, **options: Any) -> dict[str, Any]:
    return {
        name: {"kind": "scripted", "models": {"6": f"{name}-big", "31": f"{name}-small"}, **options}
    }


async def test_a_chain_falls_back_only_where_the_failure_allows() -> None:
    providers = {**scripted("a", fail="RATE_LIMITED"), **scripted("b")}
    engines = build(Settings(providers=providers, engines={"text": ["a", "b"]}))
    answer = await engines.run("text", Echo, lambda e, m: e.echo("hi", m), model_id=6)
    assert answer == "b:b-big:hi"  # a refused with 429, b served, under its own model name
    first, second = (b.engine for b in engines.bindings("text"))
    assert isinstance(first, ScriptedProvider) and first.calls == [("hi", "a-big")]

    # A failure after which the upstream may have acted is never retried elsewhere.
    providers = {**scripted("a", fail="SERVICE_ERROR", may_fall_back=False), **scripted("b")}
    engines = build(Settings(providers=providers, engines={"text": ["a", "b"]}))
    with pytest.raises(EngineError) as failed:
        await engines.run("text", Echo, lambda e, m: e.echo("hi", m), model_id=31)
    assert failed.value.code == "SERVICE_ERROR"
    assert isinstance(second := engines.bindings("text")[1].engine, ScriptedProvider)
    assert second.calls == []
    # A content refusal is the answer, not an outage: no fallback either.
    providers = {**scripted("a", fail="CONTENT_FILTERED"), **scripted("b")}
    engines = build(Settings(providers=providers, engines={"text": ["a", "b"]}))
    with pytest.raises(EngineError) as filtered:
        await engines.run("text", Echo, lambda e, m: e.echo("hi", m), model_id=6)
    assert filtered.value.code == "CONTENT_FILTERED"


async def test_a_model_no_provider_maps_is_never_sent_under_a_guessed_name() -> None:
    providers = {"a": {"kind": "scripted", "models": {"31": "small"}}, **scripted("b")}
    engines = build(Settings(providers=providers, engines={"text": ["a", "b"]}))
    assert engines.serves_model("text", 31) and engines.serves_model("text", 6)
    assert not engines.serves_model("text", 1)  # nobody maps model 1
    # Model 6: a does not map it, so b serves it even though a comes first.
    assert await engines.run("text", Echo, lambda e, m: e.echo("x", m), model_id=6) == "b:b-big:x"
    spec = BY_SLUG["generate-text"]
    pinned = spec.params.model_validate({"prompt": "hello", "modelId": 1})
    assert spec.unavailable_reason(engines, pinned) == (
        "model 1 of Generate text is not offered on this node"
    )
    assert spec.unavailable_reason(engines, spec.params.model_validate({"prompt": "x"})) is None
    # With no model mapped anywhere, a service with models is not sellable at all.
    bare = build(Settings(providers={"a": {"kind": "scripted"}}, engines={"text": "a"}))
    assert bare.available("text") and not spec.is_available(bare)


def test_local_engines_are_the_default_and_report_what_is_missing() -> None:
    built: list[str] = []

    def ocr_build(deps: EngineDeps) -> object:
        built.append("ocr")
        return object()

    local = (
        LocalEngine("ocr", "test OCR", probe=lambda: "", build=ocr_build),
        LocalEngine(
            "tts",
            "test voice",
            probe=lambda: "espeak-ng not installed",
            build=lambda deps: object(),
        ),
    )
    engines = build(Settings(), local_engines=local)
    assert engines.status("ocr").available and engines.status("ocr").source == "local"
    assert built == ["ocr"]
    tts = engines.status("tts")
    assert not tts.available and tts.reason == "no provider configured; espeak-ng not installed"
    assert engines.status("sms").reason == "no provider configured"
    # A configured provider wins over the local engine.
    routed = build(
        Settings(providers=scripted("a"), engines={"vision": "a"}),
        local_engines=(LocalEngine("vision", "v", lambda: "", lambda d: object()),),
    )
    assert routed.status("vision").source == "provider"


@pytest.mark.parametrize(
    ("providers", "engines", "message"),
    [
        ({}, {"text": "nobody"}, "names provider 'nobody', which has no [providers.nobody]"),
        ({"x": {"kind": "carrier-pigeon"}}, {"text": "x"}, "kind 'carrier-pigeon' is not known"),
        (scripted("a"), {"sms": "a"}, "a provider of kind 'scripted' (a) cannot serve it"),
        (scripted("a"), {"txet": "a"}, "[engines] txet: no service uses an engine of that name"),
        (scripted("a"), {"text": {"provider": "a"}}, "[engines.text] is a table"),
        ({"a": {"base_url": "x"}}, {}, '[providers.a] needs kind = "..."'),
        ({"a": {"kind": "scripted", "models": {"six": "m"}}}, {}, "'six' is not a model id"),
        ({"a": {"kind": "scripted", "timeout_s": 0}}, {}, "timeout_s must be a positive"),
    ],
)
def test_a_configuration_that_cannot_work_is_refused_at_start(
    providers: dict[str, Any], engines: dict[str, Any], message: str
) -> None:
    with pytest.raises(EngineConfigError) as refused:
        build(Settings(providers=providers, engines=engines))
    assert message in str(refused.value)


def test_api_keys_come_from_the_environment_and_never_show() -> None:
    table = {"a": {"kind": "openai", "api_key_env": "MY_KEY", "base_url": "https://x/v1/"}}
    config = parse_providers(table, {"MY_KEY": "sk-secret-123"})["a"]
    assert config.api_key == "sk-secret-123" and config.base_url == "https://x/v1"
    assert "sk-secret" not in repr(config)
    with pytest.raises(EngineConfigError, match="api_key_env names 'MY_KEY', which is not set"):
        parse_providers(table, {})
    both = {"a": {"kind": "openai", "api_key": "k", "api_key_env": "MY_KEY"}}
    with pytest.raises(EngineConfigError, match="not both"):
        parse_providers(both, {"MY_KEY": "k"})


def test_the_toml_form_loads_as_written(tmp_path: Any) -> None:
    path = tmp_path / "satsgate.toml"
    path.write_text(
        '[providers.main]\nkind = "scripted"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key = "k"\ntimeout_s = 30\n\n[providers.main.models]\n"6" = "big"\n\n'
        '[engines]\ntext = "main"\nvision = ["main"]\nprice_source = "https://p.example/btc"\n'
    )
    settings = load_settings(path, environ={})
    engines = build(settings)
    assert engines.status("text").providers == ("main",)
    assert engines.status("vision").available
    assert settings.engines["price_source"] == "https://p.example/btc"  # not an engine
    report = engines_report(load_settings(environ={}))
    assert "sms" in report and "no provider configured" in report and "send-sms" in report


@pytest.fixture(scope="module")
def routed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedServer]:
    overrides = down_engines(["sms"])
    overrides["providers"]["secretive"] = {
        "kind": "down",
        "base_url": "http://10.1.2.3:4/v1",
        "api_key": "sk-do-not-show",
        "models": {"31": "tiny-model"},
    }
    overrides["engines"]["text"] = "secretive"
    srv = ThreadedServer(
        make_settings(tmp_path_factory.mktemp("routed"), **overrides), {**KINDS, **DOWN_KINDS}
    )
    yield srv
    srv.stop()


async def test_callers_see_availability_but_never_providers(routed_server: ThreadedServer) -> None:
    async with httpx.AsyncClient(base_url=routed_server.url) as client:
        health = (await client.get("/api/health")).json()
        engines = {e["engine"]: e for e in health["engines"]}
        assert engines["text"] == {"engine": "text", "available": True, "source": "provider"}
        assert engines["video"] == {
            "engine": "video",
            "available": False,
            "reason": "no provider configured",
        }
        before = payment_count(routed_server)
        # Model 6 is not mapped by the text provider: refused before any invoice.
        resp = await client.post("/api/l402/generate-text", json={"prompt": "hi", "modelId": 6})
        body = assert_envelope(resp, "SERVICE_UNAVAILABLE", 503)
        assert "model 6" in body["error"]
        assert payment_count(routed_server) == before
        # Model 31 is: the 402 comes, and the call through the (down) upstream is refunded.
        resp = await client.post("/api/l402/generate-text", json={"prompt": "hi", "modelId": 31})
        assert resp.status_code == 402
        auth = await paid_l402_auth(client, "generate-text", {"prompt": "hi", "modelId": 31})
        failed = await client.post(
            "/api/l402/generate-text",
            headers={"Authorization": auth},
            json={"prompt": "hi", "modelId": 31},
        )
        body = assert_envelope(failed, "SERVICE_ERROR", 502)
        # The whole price back (model 31: its 5-sat minimum), as a withdraw link.
        assert body["refund"]["amount_sats"] == 5 and body["refund"]["lnurl_withdraw"]
        assert "secretive" not in failed.text and "10.1.2.3" not in failed.text
        for path in (
            "/api/health",
            "/.well-known/l402-services",
            "/api/openapi.json",
            "/api/l402/generate-text",
        ):
            text = json.dumps((await client.get(path)).json())
            for secret in ("secretive", "10.1.2.3", "sk-do-not-show", "tiny-model"):
                assert secret not in text, (path, secret)


class Picky(ScriptedProvider):
    """Serves only the words in its ``takes`` option: refuses others before any call."""

    def unsupported(self, request: object) -> str | None:
        takes = self.config.options.get("takes", ())
        return None if request in takes else f"{self.config.name} does not take {request!r}"


async def test_an_engine_may_refuse_a_request_before_any_invoice_and_the_chain_skips_it() -> None:
    providers = {
        "a": {"kind": "picky", "takes": ["hi"], "models": {"6": "a-big"}},
        "b": {"kind": "picky", "takes": ["hi", "yo"], "models": {"6": "b-big"}},
    }
    engines = build(
        Settings(providers=providers, engines={"text": ["a", "b"]}),
        kinds={"picky": Picky},
    )
    assert engines.unsupported("text", "hi") is None
    assert engines.unsupported("text", "yo") is None  # b takes it
    assert engines.unsupported("text", "hey") == "a does not take 'hey'"  # the first reason
    # run() skips a binding that refuses the request: "yo" goes to b alone.
    answer = await engines.run("text", Echo, lambda e, m: e.echo("yo", m), model_id=6, request="yo")
    assert answer == "b:b-big:yo"
    first = engines.bindings("text")[0].engine
    assert isinstance(first, Picky) and first.calls == []
    # A request every binding refuses (known only after payment): INVALID_INPUT, its reason.
    with pytest.raises(EngineError) as refused:
        await engines.run("text", Echo, lambda e, m: e.echo("hey", m), request="hey")
    assert refused.value.code == "INVALID_INPUT" and "a does not take 'hey'" in str(refused.value)
    # An engine without the method takes every request.
    plain = build(Settings(providers=scripted("c"), engines={"text": "c"}))
    assert plain.unsupported("text", "anything") is None
