"""generate-music's handler (the service is declared in satsgate.services.ai.speech): engine
``music``, a prediction platform. The track is checked against the asked duration
(OUTPUT_DURATION_INSANE, refunded, when far from it), stored in satsgate's file store,
and a shorter track is charged for the seconds it has (the rest refunded)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from satsgate.engines.generation import MusicEngine, MusicRequest
from satsgate.services.ai.generated_media import billed_seconds, checked_duration
from satsgate.services.base import ServiceContext, ServiceResult
from satsgate.services.catalog.pricing import music_msat

if TYPE_CHECKING:
    from satsgate.services.ai.speech import GenerateMusicParams


async def generate_music(ctx: ServiceContext, params: GenerateMusicParams) -> ServiceResult:
    ctx.progress(1.0, "submitted")
    model = params.chosen_model
    track = await ctx.engines.run(
        "music",
        MusicEngine,
        lambda engine, name: engine.generate_music(
            MusicRequest(
                prompt=params.prompt,
                duration_s=params.duration,
                lyrics=params.lyrics,
                instrumental=params.is_instrumental,
                audio_format=params.audio_format,
                sample_rate=params.sample_rate,
                bitrate=params.bitrate,
                model_name=name,
                call_id=ctx.call_id,
                progress=ctx.progress,
            )
        ),
        model_id=model,
    )
    seconds = await checked_duration(track.data, params.duration, "track")
    stored = await ctx.files.save(track.data, track.ext)
    billed = billed_seconds(params.duration, seconds)
    charged = music_msat(billed, params.lyricsAddon)
    return ServiceResult(
        {
            "audioUrl": stored.url,
            "audio_url": stored.url,
            "format": track.ext,
            "durationSeconds": round(seconds, 2),
            "bytes": stored.size,
            "modelId": model,
            "billing": {"seconds": billed, "sats": charged // 1000},
        },
        charged_msat=charged,
    )
