"""generate-music's params and handler (the service is declared in
satsgate.services.ai.speech): engine ``music``, a prediction platform. The track is
checked against the asked duration (OUTPUT_DURATION_INSANE, refunded, when far from it),
stored in satsgate's file store, and a shorter track is charged for the seconds it has
(the rest refunded)."""

from __future__ import annotations

from typing import ClassVar, Literal, Self

from pydantic import Field, model_validator

from satsgate.engines.generation import MusicEngine, MusicRequest
from satsgate.services.ai.generated_media import stored_by_the_second
from satsgate.services.base import ServiceContext, ServiceResult
from satsgate.services.catalog.pricing import MUSIC_LYRICS_ADDON_SATS, music_msat
from satsgate.services.inputs.params import ModelChoice, ServiceParams, alias


class GenerateMusicParams(ServiceParams, ModelChoice):
    """Priced 5 sats per second of ``duration`` (15 to 300, default 60); lyricsAddon (the
    tool form's name for lyrics_optimizer) adds 25."""

    MODELS: ClassVar[tuple[int, ...]] = (23,)
    DEFAULT: ClassVar[int] = 23

    prompt: str = Field(
        min_length=1,
        max_length=2000,
        description="Style, BPM, key, genre, mood, instruments; up to 2000 characters.",
    )
    lyrics: str | None = Field(
        None,
        min_length=1,
        max_length=3500,
        description="Up to 3500 characters; section tags like [Verse] on their own lines.",
    )
    duration: int = Field(60, ge=15, le=300, description="Seconds, 15 to 300.")
    is_instrumental: bool = Field(
        False, validation_alias=alias("is_instrumental", "isInstrumental", "instrumental")
    )
    lyricsAddon: bool = Field(
        False,
        validation_alias=alias("lyricsAddon", "lyrics_optimizer", "lyricsOptimizer"),
        description=f"Write lyrics from the prompt (+{MUSIC_LYRICS_ADDON_SATS} sats).",
    )
    lyricsAbout: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        validation_alias=alias("lyricsAbout", "lyrics_about"),
        description="What generated lyrics are about (with lyricsAddon).",
    )
    sample_rate: Literal[16000, 24000, 32000, 44100] = Field(
        44100, validation_alias=alias("sample_rate", "sampleRate")
    )
    bitrate: Literal[32000, 64000, 128000, 256000] = 256000
    audio_format: Literal["mp3", "wav", "pcm"] = Field(
        "mp3", validation_alias=alias("audio_format", "audioFormat", "format")
    )

    @model_validator(mode="after")
    def _lyrics_rules(self) -> Self:
        if self.is_instrumental and (self.lyrics or self.lyricsAddon):
            raise ValueError("an instrumental takes no lyrics and no lyricsAddon")
        if self.lyrics and self.lyricsAddon:
            raise ValueError("send lyrics or lyricsAddon, not both")
        if self.lyricsAbout and not self.lyricsAddon:
            raise ValueError("lyricsAbout needs lyricsAddon")
        return self


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
    stored, seconds, billed = await stored_by_the_second(
        ctx, track.data, track.ext, params.duration, "track"
    )
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
