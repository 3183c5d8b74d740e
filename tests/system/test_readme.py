"""The README's examples work as written: its curl walk-through buys a card from a real
server, and its two "own key" configurations load, make text (and, with the OpenAI key,
vision and images) available, and sell a paid call through the fake OpenAI-compatible
upstream under the model names they map."""

from __future__ import annotations

import base64
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from satsgate.cli import engines_report
from satsgate.config.settings import load_settings
from tests.conftest import ThreadedServer, make_settings, paid_l402_auth
from tests.fakes.fake_ai_upstream import OPENAI_KEY, FakeAIUpstream

README = Path(__file__).resolve().parents[2] / "README.md"
CHAT = "/v1/chat/completions"


def fenced(language: str) -> list[str]:
    """The README's code blocks in ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), re.M | re.S)


def openai_block() -> str:
    (block,) = [b for b in fenced("toml") if "[providers.openai]" in b]
    return block


def local_block() -> str:
    (block,) = [b for b in fenced("toml") if "[providers.local]" in b]
    return block


def available(report: str) -> set[str]:
    return {line.split()[0] for line in report.splitlines() if " available " in line}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAIUpstream]:
    upstream = FakeAIUpstream()
    yield upstream
    upstream.stop()


def test_the_readme_has_the_examples_these_tests_read() -> None:
    assert len(fenced("toml")) == 2
    assert len(fenced("bash")) == 1


def test_the_own_key_configs_load_and_make_their_engines_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    for name, block, engines in (
        ("openai", openai_block(), {"text", "vision", "image"}),
        ("local", local_block(), {"text"}),
    ):
        path = tmp_path / f"{name}.toml"
        path.write_text(block)
        report = engines_report(load_settings(path, environ={}))
        assert engines <= available(report), report
        for engine in engines:
            (line,) = [ln for ln in report.splitlines() if ln.split()[:1] == [engine]]
            assert name in line, line  # served by the README's provider, not a local engine


async def test_the_openai_config_sells_text_under_its_mapped_model_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeAIUpstream
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    config = tmp_path / "openai.toml"
    config.write_text(openai_block().replace("https://api.openai.com/v1", f"{fake.url}/v1"))
    loaded = load_settings(config, environ={})
    settings = make_settings(tmp_path / "data", providers=loaded.providers, engines=loaded.engines)
    server = ThreadedServer(settings)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            for model_id, upstream_model in ((31, "gpt-4.1-nano"), (6, "gpt-4.1")):
                body = {"prompt": "Say hello.", "modelId": model_id}
                auth = await paid_l402_auth(client, "generate-text", body)
                resp = await client.post(
                    "/api/l402/generate-text", json=body, headers={"Authorization": auth}
                )
                assert resp.status_code == 200, resp.text
                assert resp.text.startswith("You said: Say hello.")
                assert resp.headers["X-Route-Model"] == str(model_id)
                seen = fake.requests(CHAT)[-1].json
                assert seen is not None and seen["model"] == upstream_model
    finally:
        server.stop()


def test_the_curl_walkthrough_buys_a_card(server: ThreadedServer, tmp_path: Path) -> None:
    (script,) = fenced("bash")
    assert "localhost:8402" in script
    script = script.replace("localhost:8402", server.url.removeprefix("http://"))
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # It ends with a line a person reads, not the card's base64: the card is saved.
    (line,) = done.stdout.splitlines()
    assert line.startswith("card.png: ") and f"also at {server.url}/" in line
    png = (tmp_path / "card.png").read_bytes()
    assert png.startswith(b"\x89PNG") and f"{len(png)} bytes" in line
    card = httpx.Response(200, content=(tmp_path / "card.json").read_bytes()).json()
    assert base64.b64decode(card["image_base64"]) == png
