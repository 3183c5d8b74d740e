"""What a streamed chat costs satsgate per chunk: the ``text`` engine's ``stream()`` of
kinds ``openai`` and ``anthropic`` against an upstream in its own process that streams
a fixed answer of N chunks at once, CPU seconds of this process (the engine, its HTTP
client and the event parsing) divided by the chunks.

    python bench/stream_chunks.py            # 60 streams of 200 chunks per kind
    python bench/stream_chunks.py --quick    # 15 streams

The gate's own part of a streamed call (its server-sent events to the caller, the
usage and the receipt at the end) is not in it: that is the paid call's, per call and
per chunk written, measured with the call (bench/proxy_overhead.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, cast

from aiohttp import web

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

CHUNKS = 200


def _openai_events() -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        doc = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        return b"data: " + json.dumps({**doc, "choices": [choice]}).encode() + b"\n\n"

    pieces = [chunk({"content": f"word{i} "}) for i in range(CHUNKS)]
    usage = {"prompt_tokens": 3, "completion_tokens": CHUNKS, "total_tokens": CHUNKS + 3}
    last = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    tail = b"data: " + json.dumps({**last, "choices": [], "usage": usage}).encode() + b"\n\n"
    return b"".join([*pieces, tail, b"data: [DONE]\n\n"])


def _anthropic_events() -> bytes:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()

    message = {"id": "msg", "type": "message", "role": "assistant", "content": [],
               "model": "m", "usage": {"input_tokens": 3, "output_tokens": 1}}  # fmt: skip
    pieces = [event("message_start", {"message": message})]
    for i in range(CHUNKS):
        delta = {"type": "text_delta", "text": f"word{i} "}
        pieces.append(event("content_block_delta", {"index": 0, "delta": delta}))
    stop = {"stop_reason": "end_turn", "stop_sequence": None}
    pieces.append(event("message_delta", {"delta": stop, "usage": {"output_tokens": CHUNKS}}))
    pieces.append(event("message_stop", {}))
    return b"".join(pieces)


def serve_upstream(port: int) -> None:
    """Both APIs' streamed answers, each chunk its own write."""
    from _serve import serve

    openai_chunks = _openai_events().split(b"\n\n")
    anthropic_chunks = _anthropic_events().split(b"\n\n")

    def streamer(chunks: list[bytes]) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            await request.read()
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for piece in chunks:
                if piece:
                    await resp.write(piece + b"\n\n")
            await resp.write_eof()
            return resp

        return handle

    app = web.Application()
    app.router.add_post("/v1/chat/completions", streamer(openai_chunks))
    app.router.add_post("/v1/messages", streamer(anthropic_chunks))
    serve(app, "127.0.0.1", port)


async def measure(upstream: str, streams: int) -> dict[str, float]:
    from satsgate.config.settings import Settings
    from satsgate.engines.chat import ChatMessage, ChatRequest
    from satsgate.engines.config import ProviderConfig
    from satsgate.engines.providers.anthropic import AnthropicProvider
    from satsgate.engines.providers.openai import OpenAIProvider
    from satsgate.engines.registry import EngineDeps

    deps = EngineDeps(Settings(), cast(Any, None))

    def config(name: str, kind: str, base_url: str) -> ProviderConfig:
        return ProviderConfig(
            name=name, kind=kind, base_url=base_url, api_key="k", models={"31": "m"}
        )

    providers: dict[str, Any] = {
        "openai": OpenAIProvider(config("o", "openai", f"{upstream}/v1"), deps),
        "anthropic": AnthropicProvider(config("a", "anthropic", upstream), deps),
    }
    request = ChatRequest(messages=(ChatMessage("user", "hello"),), model_name="m")
    results: dict[str, float] = {}
    for kind, provider in providers.items():
        engine = cast(Any, provider.engine("text"))

        async def one(engine: Any = engine) -> int:
            return sum([1 async for chunk in engine.stream(request) if chunk.text])

        for _ in range(3):  # warm up: connections, imports
            await one()
        started = time.process_time()
        texts = 0
        for _ in range(streams):
            texts += await one()
        cpu = time.process_time() - started
        assert texts == streams * CHUNKS, texts
        results[kind] = cpu / texts * 1e6
        await provider.aclose()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT")
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return 0
    import tempfile

    from run import free_port, start_server

    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(
            "upstream",
            [__file__, "--serve-upstream", str(free_port())],
            Path(tmp) / "upstream.log",
        )
        try:
            streams = 15 if args.quick else 60
            results = asyncio.run(measure(server.url, streams))
        finally:
            server.stop(5)
    for kind, us in results.items():
        print(f"{kind}: {us:.1f} us of CPU per streamed chunk ({streams} streams of {CHUNKS})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
