"""Every service's validation and quote, before payment: a table of valid bodies with their
exact price and of invalid bodies that must be refused (both spellings of every aliased
field, every limit of the spec). The same path the gate takes: validate_params ->
prevalidate -> quote_sats."""

from __future__ import annotations

from typing import Any

import pytest

from satsgate.errors import ApiError
from satsgate.payments.challenger import validate_params
from satsgate.services.base import PrecheckMemo
from satsgate.services.catalog.rates import FALLBACK
from satsgate.services.registry import BY_SLUG
from tests.services.test_services_media import (
    PNG,
    b64,
    epub_bytes,
    flac_bytes,
    mp3_cbr_bytes,
    pdf_bytes,
    png_bytes,
    wav_bytes,
)

PNG_BIG = b64(png_bytes(80, 60))
PDF1, PDF2, PDF3 = (b64(pdf_bytes(n)) for n in (1, 2, 3))
WAV30, WAV61, WAV12, WAV5 = (b64(wav_bytes(s)) for s in (30, 61, 12, 5))
MP3_10 = b64(mp3_cbr_bytes(10))
FLAC_20 = b64(flac_bytes(20))
BOOK_33K = b64(epub_bytes(["a" * 13_000, "b" * 20_000]))
BOOK_SMALL = b64(epub_bytes(["Once upon a time."]))
BOOK_106K = b64(epub_bytes(["c" * 106_000]))
TEXT = b64(b"plain words, not a document")
US, GB, DE, PH = "+14155550123", "+447700900123", "+4915112345678", "+639171234567"


async def quote(slug: str, body: Any) -> int:
    spec = BY_SLUG[slug]
    params = validate_params(spec, body, FALLBACK)
    if spec.prevalidate is not None:
        await spec.prevalidate(params, PrecheckMemo())
    return spec.quote_sats(params, FALLBACK)


VALID: list[tuple[str, dict[str, Any], int]] = [
    # generate-image: by tier and resolution; HTTP `input` form and tool form
    ("generate-image", {"input": {"prompt": "a cat"}}, 1200),
    ("generate-image", {"prompt": "a cat", "modelId": "better"}, 150),
    ("generate-image", {"prompt": "a cat", "tier": "better", "width": 2048}, 300),
    (
        "generate-image",
        {"input": {"prompt": "c", "width": 1536, "height": 1024}, "modelId": 8},
        300,
    ),
    ("generate-image", {"prompt": "a cat", "modelId": "2"}, 100),
    ("generate-image", {"prompt": "a cat", "modelId": 2, "imageBase64": PNG}, 100),
    ("generate-image", {"input": {"prompt": "a cat"}, "modelId": 8, "file": [PNG] * 10}, 150),
    ("generate-image", {"prompt": "a cat", "model_id": "16", "image": PNG}, 1200),
    ("generate-image", {"prompt": "a cat on a sofa", "model": "auto"}, 100),
    ("generate-image", {"prompt": 'a poster reading "HODL"', "model": "auto"}, 1200),
    ("generate-image", {"prompt": "a cat", "model": "auto", "file": [PNG, PNG]}, 150),
    # edit-image: flat at any output size
    ("edit-image", {"prompt": "stormy sky", "imageBase64": PNG}, 200),
    (
        "edit-image",
        {
            "prompt": "stormy sky",
            "image": PNG,
            "resolution": "4K",
            "output_format": "webp",
            "returnBase64": True,
        },
        200,
    ),
    # analyze-image
    ("analyze-image", {"imageBase64": PNG}, 21),
    ("analyze-image", {"file": PNG, "prompt": "What is this?", "modelId": 5}, 21),
    # image_process family
    ("remove-background", {"imageBase64": PNG}, 44),
    ("upscale-image", {"image": PNG, "scale": 4, "faceEnhance": True}, 5),
    ("upscale-image", {"imageBase64": PNG, "face_enhance": False}, 5),
    ("restore-face", {"file": PNG, "fidelity": 0.9}, 25),
    ("detect-nsfw", {"imageBase64": PNG}, 2),
    ("detect-objects", {"imageBase64": PNG, "prompt": "cat, dog"}, 5),
    ("detect-objects", {"image": PNG, "labels": "red car", "threshold": 0.5}, 5),
    ("remove-object", {"imageBase64": PNG, "maskBase64": PNG}, 130),
    ("remove-object", {"image": PNG, "mask": PNG}, 130),
    ("colorize-image", {"imageBase64": PNG}, 5),
    ("deblur-image", {"imageBase64": PNG}, 110),
    ("estimate-depth", {"imageBase64": PNG}, 5),
    # generate-3d-model: exactly one of image or prompt
    ("generate-3d-model", {"prompt": "a wooden chair"}, 1600),
    (
        "generate-3d-model",
        {
            "imageBase64": PNG,
            "callback_url": "https://hooks.example.org/x",
            "callback_id": "c" * 128,
        },
        1600,
    ),
    # generate-text: input length at the model's rate, minimums
    ("generate-text", {"input": [{"role": "user", "content": "x" * 100}]}, 15),
    (
        "generate-text",
        {
            "input": [
                {"role": "system", "content": "x" * 400},
                {"role": "user", "content": "y" * 600},
            ]
        },
        100,
    ),
    ("generate-text", {"prompt": "x" * 3000, "modelId": 31}, 5),
    ("generate-text", {"prompt": "x" * 10_000, "tier": "standard"}, 10),
    ("generate-text", {"prompt": "x" * 200, "modelId": "better"}, 5),
    ("generate-text", {"prompt": "x" * 1000, "modelId": 1}, 10),
    (
        "generate-text",
        {"prompt": "hi", "fileContext": "y" * 288, "systemPrompt": "z" * 10, "modelId": 6},
        30,
    ),
    ("generate-text", {"prompt": "hi", "file_context": "y" * 298, "maxTokens": 100}, 30),
    ("generate-text", {"prompt": "describe", "imageBase64": PNG}, 15),
    ("generate-text", {"prompt": "describe", "imageData": PNG, "fileName": "a.png"}, 15),
    ("generate-text", {"prompt": "Hello there, how are you", "model": "auto"}, 5),
    ("generate-text", {"prompt": "Please prove this theorem", "model": "auto"}, 15),
    ("generate-text", {"prompt": "x" * 5000, "model": "auto"}, 500),
    # multilingual-ask: (question + 2000) at the tier rate, +15%, minimum 2
    ("multilingual-ask", {"question": "x" * 100, "language": "de"}, 3),
    ("multilingual-ask", {"question": "q", "language": "German", "model": "Best"}, 231),
    ("multilingual-ask", {"question": "q" * 8000, "language": "pt-BR", "tier": "better"}, 115),
    # translate-text: 1 sat per 1000 characters, minimum 1; routed targets 10x; pinned model
    ("translate-text", {"text": "x" * 5000, "targetLanguage": "es"}, 5),
    ("translate-text", {"text": "hello", "targetLanguage": "Spanish"}, 1),
    ("translate-text", {"text": "x" * 1500, "target_language": "haw"}, 15),
    ("translate-text", {"text": "x" * 2500, "targetLanguage": "fr", "modelId": 6}, 250),
    ("translate-text", {"text": "x", "targetLanguage": "pt-BR", "sourceLanguage": "auto"}, 1),
    (
        "translate-text",
        {"text": "x" * 1001, "targetLanguage": "zh", "source_language": "German"},
        2,
    ),
    # translate-rare-language: 50 + 0.002 per character
    ("translate-rare-language", {"text": "x" * 1000, "targetLanguage": "tpi"}, 52),
    ("translate-rare-language", {"text": "hi", "target_language": "Tok Pisin"}, 51),
    ("translate-rare-language", {"text": "x" * 500, "targetLanguage": "sw"}, 51),
    # translate-epub: visible characters at the target's rate, minimum 50
    ("translate-epub", {"epubBase64": BOOK_106K, "targetLanguage": "es"}, 106),
    ("translate-epub", {"file": BOOK_SMALL, "targetLanguage": "French"}, 50),
    (
        "translate-epub",
        {
            "epubBase64": BOOK_33K,
            "target_language": "haw",
            "fileName": "b.epub",
            "callbackUrl": "https://hooks.example.org/done",
        },
        330,
    ),
    # search
    ("search", {"query": "lightning"}, 21),
    ("search", {"q": "lightning", "num_results": 20, "language": "de"}, 21),
    # text-to-speech: characters at the tier's rate
    ("text-to-speech", {"text": "x" * 1600, "voice": "English_Aria"}, 100),
    ("text-to-speech", {"text": "x" * 5000}, 313),
    (
        "text-to-speech",
        {
            "text": "x" * 1600,
            "modelId": "global",
            "voice_description": "female, young adult, british",
        },
        16,
    ),
    (
        "text-to-speech",
        {
            "text": "x" * 1060,
            "tier": "standard",
            "language": "sw",
            "voiceDescription": "Male, very low pitch, whisper, indian accent",
        },
        10,
    ),
    ("text-to-speech", {"text": "x" * 1000, "modelId": 3, "voice": "English_Narrator"}, 200),
    (
        "text-to-speech",
        {"text": "x" * 1000, "modelId": "studio", "voice": "Custom_ab12cd34ef"},
        200,
    ),
    (
        "text-to-speech",
        {"text": "x" * 160, "modelId": 34, "voice": "German_Felix", "speed": 0.5},
        10,
    ),
    ("text-to-speech", {"text": "x", "speed": 2.0, "emotion": "happy"}, 1),
    ("text-to-speech", {"text": "x" * 50, "model": "auto", "voice": "English_Narrator"}, 10),
    ("text-to-speech", {"text": "x" * 1060, "model": "auto", "language": "sw"}, 10),
    ("text-to-speech", {"text": "x" * 160, "model": "auto"}, 10),
    # clone-voice: flat; a URL or a 10 s to 5 min MP3/M4A/WAV sample
    ("clone-voice", {"voiceFileUrl": "https://files.example.org/s.mp3"}, 7500),
    ("clone-voice", {"voice_file_url": "https://files.example.org/s.mp3", "accuracy": 0.9}, 7500),
    ("clone-voice", {"file": WAV12}, 7500),
    ("clone-voice", {"voiceFileBase64": b64(mp3_cbr_bytes(11)), "model": "studio"}, 7500),
    # transcribe-audio: 10 per started minute
    ("transcribe-audio", {"file": WAV61, "type": "transcription"}, 20),
    ("transcribe-audio", {"audioBase64": WAV30, "language": "de"}, 10),
    (
        "transcribe-audio",
        {
            "audio": MP3_10,
            "type": "translation",
            "language": "German",
            "names": ["Satoshi"],
            "timestamps": "word",
        },
        10,
    ),
    ("transcribe-audio", {"file": FLAC_20, "modelId": 10}, 10),
    # transcribe-translate: (base + 5) * 1.15
    ("transcribe-translate", {"file": WAV61, "targetLanguage": "Spanish"}, 29),
    (
        "transcribe-translate",
        {"audioBase64": WAV30, "target_language": "ja", "sourceLanguage": "en"},
        18,
    ),
    # epub-audiobook: premium 33 chars/sat, global 106, studio 5, minimum 500, + translation
    ("epub-audiobook", {"epubBase64": BOOK_33K, "fileName": "b.epub"}, 1000),
    ("epub-audiobook", {"file": BOOK_SMALL, "file_name": "b.EPUB"}, 500),
    (
        "epub-audiobook",
        {
            "epubBase64": BOOK_106K,
            "fileName": "b.epub",
            "modelId": "global",
            "voice": "female, elderly",
        },
        1000,
    ),
    (
        "epub-audiobook",
        {"epubBase64": BOOK_33K, "fileName": "b.epub", "translateToLanguage": "es"},
        1033,
    ),
    (
        "epub-audiobook",
        {
            "epubBase64": BOOK_33K,
            "fileName": "b.epub",
            "modelId": 3,
            "voice": "English_Narrator",
            "selectedChapterIndices": [0],
        },
        2600,
    ),
    ("epub-audiobook", {"epubBase64": PDF2, "fileName": "scan.pdf", "speed": 1.5}, 500),
    (
        "epub-audiobook",
        {"epubBase64": b64(b"w" * 66_000), "fileName": "notes.txt", "language": "de"},
        2000,
    ),
    # generate-music: 5 per second (15 to 300), lyricsAddon +25
    ("generate-music", {"prompt": "lo-fi"}, 300),
    ("generate-music", {"prompt": "lo-fi", "duration": 15}, 75),
    (
        "generate-music",
        {"prompt": "x" * 2000, "duration": 300, "lyricsAddon": True, "lyricsAbout": "the sea"},
        1525,
    ),
    ("generate-music", {"prompt": "x", "lyrics_optimizer": True, "duration": 20}, 125),
    (
        "generate-music",
        {
            "prompt": "x",
            "lyrics": "[Verse]\n" + "l" * 3400,
            "duration": 30,
            "audio_format": "wav",
            "sample_rate": 44100,
        },
        150,
    ),
    ("generate-music", {"prompt": "x", "is_instrumental": True, "duration": 100}, 500),
    # video: per second by resolution, 3 to 15 s
    ("generate-video", {"prompt": "waves"}, 1250),
    ("generate-video", {"prompt": "waves", "duration": 3, "mode": "standard"}, 750),
    (
        "generate-video",
        {
            "prompt": "waves",
            "duration": 15,
            "resolution": "2K",
            "generate_audio": True,
            "reference_image": PNG,
        },
        6000,
    ),
    ("generate-video", {"prompt": "waves", "referenceAudio": WAV5, "generateAudio": True}, 1250),
    ("animate-image", {"prompt": "turn", "image": PNG}, 1250),
    (
        "animate-image",
        {"prompt": "turn", "imageBase64": PNG, "duration": 10, "resolution": "2K"},
        4000,
    ),
    # OCR: pages counted before payment; an image is one page
    ("extract-document", {"documentBase64": PDF3}, 30),
    ("extract-document", {"file": PNG, "modelId": 27}, 10),
    ("extract-receipt", {"documentBase64": PDF2}, 50),
    ("extract-receipt", {"imageBase64": PNG}, 25),
    # convert-file
    ("convert-file", {"file": PNG, "targetFormat": "jpeg"}, 100),
    (
        "convert-file",
        {"fileBase64": b64(b"# Title"), "fileName": "a.md", "target_format": "pdf"},
        100,
    ),
    ("convert-file", {"documentBase64": PDF1, "to": "txt"}, 100),
    # e-signature: flat per document
    (
        "e-signature",
        {
            "documentBase64": PDF1,
            "signers": [{"name": "A", "email": "a@example.org"}],
            "customerEmail": "me@example.org",
        },
        1000,
    ),
    (
        "e-signature",
        {
            "file": PDF2,
            "customer_email": "me@example.org",
            "note": "please",
            "signers": [
                {"name": "A", "email": "a@example.org"},
                {"name": "B", "email": "b@example.org"},
            ],
        },
        1000,
    ),
    # boarding passes: 100 per document (refunded down to the passes found)
    ("boardingpass-wallet", {"documentBase64": PDF1}, 100),
    ("boardingpass-wallet", {"documents": [PDF1, PNG, PDF1]}, 300),
    ("boardingpass-wallet", {"documents": [PNG] * 8}, 800),
    # e-mail: 200 per recipient
    ("send-email", {"to": "a@example.org", "subject": "Hi", "text": "Hello"}, 200),
    (
        "send-email",
        {
            "email": ["a@example.org", "b@example.org", "c@xn--mnchen-3ya.de"],
            "subject": "Hi",
            "html": "<p>Hello</p>",
            "reply_to": "me@example.org",
            "from_name": "Me",
        },
        600,
    ),
    # SMS by destination country
    ("send-sms", {"phone_number": US, "message": "hi"}, 15),
    ("send-sms", {"phoneNumber": GB, "message": "x" * 120}, 40),
    ("send-sms", {"to": "+18765551234", "message": "Jamaica"}, 60),
    # automated call: per minute by destination
    ("call", {"phone_number": US, "message": "Your table is ready"}, 30),
    ("call", {"phoneNumber": PH, "text": "hi", "durationMinutes": 3, "language": "fil-PH"}, 360),
    # AI call: minutes x (telephony + AI), minimum 50
    ("ai-call", {"phone_number": US, "task": "Book a table"}, 450),
    (
        "ai-call",
        {
            "phoneNumber": GB,
            "task": "t",
            "durationMinutes": 1,
            "language": "en_gb",
            "voice": "myra",
            "beginMessage": "Hello",
            "callerName": "Ann",
            "callbackNumber": US,
            "voicemail": "message",
            "callScreening": False,
            "refundAddress": "ann@getalby.com",
        },
        160,
    ),
    (
        "ai-call",
        {
            "phone_number": DE,
            "task": "t",
            "duration_minutes": 10,
            "language": "multi",
            "caller_name": "Ann",
            "call_screening": True,
            "refund_address": "a@b.io",
        },
        1700,
    ),
    # fax
    ("send-fax", {"faxNumber": US, "documentBase64": PDF3}, 500),
    ("send-fax", {"fax_number": GB, "file": PDF1, "coverText": "For you"}, 500),
    ("receive-fax", {}, 500),
    ("receive-fax", {"country": "gb", "forwardEmail": "me@example.org"}, 500),
    # voice bridge: deposit minutes x (telephony + 20)
    ("voice-bridge-open", {"phoneNumber": US}, 250),
    (
        "voice-bridge-open",
        {
            "phone_number": DE,
            "duration_minutes": 2,
            "codec": "pcm_l16_16000",
            "stt_enabled": False,
            "ttsEnabled": True,
        },
        140,
    ),
    # vote
    ("vote", {"slug": "generate-podcast"}, 1),
]


@pytest.mark.parametrize(
    ("slug", "body", "sats"), VALID, ids=[f"{s}-{i}" for i, (s, _b, _p) in enumerate(VALID)]
)
async def test_valid_bodies_quote_exactly(slug: str, body: dict[str, Any], sats: int) -> None:
    assert await quote(slug, body) == sats


INVALID: list[tuple[str, Any]] = [
    ("generate-image", {"prompt": "cat", "modelId": 99}),  # unknown id
    ("generate-image", {"prompt": "cat", "modelId": 6}),  # a text model
    ("generate-image", {"prompt": "cat", "tier": "premium"}),
    ("generate-image", {"prompt": "cat", "modelId": 2, "width": 2048}),  # standard is 1K only
    ("generate-image", {"prompt": "cat", "modelId": 2, "file": [PNG, PNG]}),  # capacity 1
    ("generate-image", {"prompt": "cat", "modelId": 8, "file": [PNG] * 11}),
    ("generate-image", {"input": {"prompt": "cat"}, "prompt": "cat"}),  # two forms
    ("generate-image", {"input": {"prompt": "cat"}, "width": 512}),
    ("generate-image", {"prompt": "cat", "imageBase64": PNG, "file": PNG}),  # both spellings
    ("generate-image", {"prompt": "cat", "file": "not base64 at all!"}),
    ("generate-image", {"prompt": "cat", "file": TEXT}),  # not an image
    ("generate-image", {"promt": "cat"}),  # typo
    ("generate-image", {"prompt": ""}),
    ("generate-image", {"prompt": "cat", "width": 100}),
    ("generate-image", {"prompt": "cat", "width": 4096}),
    ("generate-image", {"prompt": "cat", "model": "auto", "modelId": 16}),
    ("generate-image", {"prompt": "cat", "model": "best"}),
    ("generate-image", ["not", "an", "object"]),
    ("edit-image", {"prompt": "x"}),
    ("edit-image", {"prompt": "x", "imageBase64": PNG, "resolution": "8K"}),
    ("edit-image", {"prompt": "x", "imageBase64": PNG, "outputFormat": "gif"}),
    ("edit-image", {"prompt": "x", "imageBase64": PNG, "modelId": 16}),
    ("analyze-image", {"imageBase64": PNG, "modelId": 6}),
    ("analyze-image", {"prompt": "what?"}),
    ("upscale-image", {"imageBase64": PNG, "scale": 5}),
    ("upscale-image", {"imageBase64": PNG, "scale": 1}),
    ("restore-face", {"imageBase64": PNG, "fidelity": 1.5}),
    ("detect-objects", {"imageBase64": PNG}),  # what to find is required
    ("detect-objects", {"imageBase64": PNG, "prompt": "cat", "threshold": 2}),
    ("remove-object", {"imageBase64": PNG}),
    ("remove-object", {"imageBase64": PNG, "maskBase64": PNG_BIG}),  # mask size differs
    ("detect-nsfw", {"imageBase64": b64(b"%PDF-1.4 not an image")}),
    ("remove-background", {"imageBase64": PNG, "image": PNG}),
    ("colorize-image", {"file": "data:image/png;base64,!!!"}),
    ("deblur-image", {}),
    ("estimate-depth", {"imageBase64": PNG, "depth": "raw"}),
    ("generate-3d-model", {}),
    ("generate-3d-model", {"prompt": "chair", "imageBase64": PNG}),
    ("generate-3d-model", {"prompt": "chair", "callback_id": "c" * 129}),
    ("generate-text", {"input": [{"role": "user", "content": "x"}], "prompt": "x"}),
    ("generate-text", {}),
    ("generate-text", {"input": [{"role": "robot", "content": "x"}]}),
    ("generate-text", {"input": [{"role": "user", "content": ""}]}),
    ("generate-text", {"input": []}),
    ("generate-text", {"prompt": "x", "maxTokens": 0}),
    ("generate-text", {"prompt": "x", "modelId": 16}),
    ("generate-text", {"prompt": "x", "modelId": 31, "imageData": PNG}),  # vision: best only
    ("generate-text", {"prompt": "x", "imageData": TEXT}),
    ("generate-text", {"prompt": "x" * 120_001, "modelId": 31}),  # over the model's context
    ("generate-text", {"prompt": "x", "model": "smart"}),
    ("multilingual-ask", {"question": "q", "language": "Klingon"}),
    ("multilingual-ask", {"question": "q", "language": "de", "model": "auto"}),
    ("multilingual-ask", {"question": "", "language": "de"}),
    ("multilingual-ask", {"question": "q"}),
    ("translate-text", {"text": "x", "targetLanguage": "xx"}),
    ("translate-text", {"text": "x", "targetLanguage": "es", "sourceLanguage": "Klingon"}),
    ("translate-text", {"text": "x", "targetLanguage": "es", "modelId": 16}),
    ("translate-text", {"text": "", "targetLanguage": "es"}),
    ("translate-text", {"text": "x", "targetLanguage": "es", "target_language": "fr"}),
    ("translate-rare-language", {"text": "x", "targetLanguage": "zzz"}),
    ("translate-rare-language", {"text": "x" * 20_001, "targetLanguage": "tpi"}),
    ("translate-epub", {"epubBase64": b64(b"not a zip"), "targetLanguage": "es"}),
    ("translate-epub", {"epubBase64": BOOK_SMALL, "targetLanguage": "Elvish"}),
    ("translate-epub", {"epubBase64": BOOK_SMALL}),
    ("search", {"query": "x", "count": 21}),
    ("search", {"query": ""}),
    ("search", {"query": "x", "language": "xx"}),
    ("text-to-speech", {"text": "x" * 5001}),
    ("text-to-speech", {"text": ""}),
    ("text-to-speech", {"text": "x", "speed": 0.4}),
    ("text-to-speech", {"text": "x", "speed": 2.1}),
    ("text-to-speech", {"text": "x", "voice": "English_Narrator"}),  # studio voice on premium
    ("text-to-speech", {"text": "x", "modelId": 3, "voice": "English_Aria"}),  # premium on studio
    ("text-to-speech", {"text": "x", "voice": "Klingon_Worf"}),
    ("text-to-speech", {"text": "x", "modelId": 43, "voice": "English_Aria"}),  # global: no voices
    ("text-to-speech", {"text": "x", "modelId": 43, "voice_description": "female, robotic"}),
    ("text-to-speech", {"text": "x", "modelId": 43, "voice_description": "male, female"}),
    ("text-to-speech", {"text": "x", "modelId": 43, "voice_description": "high"}),  # no "pitch"
    ("text-to-speech", {"text": "x", "voice_description": "female"}),  # global only
    ("text-to-speech", {"text": "x", "language": "de"}),  # global only
    ("text-to-speech", {"text": "x", "modelId": 43, "language": "not a code"}),
    ("text-to-speech", {"text": "x", "modelId": 43, "emotion": "happy"}),  # premium only
    ("text-to-speech", {"text": "x", "modelId": 10}),  # transcription model
    ("text-to-speech", {"text": "x", "voice_description": "male", "voiceDescription": "male"}),
    ("clone-voice", {}),
    ("clone-voice", {"voiceFileUrl": "http://files.example.org/s.mp3"}),
    ("clone-voice", {"voiceFileUrl": "https://127.0.0.1/s.mp3"}),
    ("clone-voice", {"voiceFileUrl": "https://files.example.org/s.mp3", "file": WAV12}),
    ("clone-voice", {"file": WAV5}),  # shorter than 10 s
    ("clone-voice", {"file": FLAC_20}),  # MP3, M4A or WAV only
    ("clone-voice", {"voiceFileUrl": "https://files.example.org/s.mp3", "accuracy": 2}),
    ("transcribe-audio", {"file": WAV30, "language": "sw"}),  # not one of the 13
    ("transcribe-audio", {"file": WAV30, "type": "summary"}),
    ("transcribe-audio", {"file": TEXT}),
    ("transcribe-audio", {"file": WAV30, "names": [""]}),
    ("transcribe-audio", {"file": WAV30, "audioBase64": WAV30}),
    ("transcribe-translate", {"file": WAV30}),
    ("transcribe-translate", {"file": WAV30, "targetLanguage": "Klingon"}),
    ("transcribe-translate", {"file": WAV30, "targetLanguage": "es", "sourceLanguage": "sw"}),
    ("epub-audiobook", {"epubBase64": BOOK_SMALL}),  # fileName is required
    ("epub-audiobook", {"epubBase64": BOOK_SMALL, "fileName": "book.docx"}),
    ("epub-audiobook", {"epubBase64": BOOK_SMALL, "fileName": "b.epub", "speed": 3}),
    (
        "epub-audiobook",
        {"epubBase64": BOOK_SMALL, "fileName": "b.epub", "modelId": 3, "voice": "English_Aria"},
    ),
    (
        "epub-audiobook",
        {"epubBase64": BOOK_SMALL, "fileName": "b.epub", "modelId": 43, "voice": "robot"},
    ),
    (
        "epub-audiobook",
        {"epubBase64": BOOK_SMALL, "fileName": "b.epub", "selectedChapterIndices": [3]},
    ),
    (
        "epub-audiobook",
        {"epubBase64": BOOK_SMALL, "fileName": "b.epub", "translateToLanguage": "Klingon"},
    ),
    ("epub-audiobook", {"epubBase64": b64(b"not a zip"), "fileName": "b.epub"}),
    ("generate-music", {"prompt": "x", "duration": 14}),
    ("generate-music", {"prompt": "x", "duration": 301}),
    ("generate-music", {"prompt": "x" * 2001}),
    ("generate-music", {"prompt": "x", "lyrics": "l" * 3501}),
    ("generate-music", {"prompt": "x", "lyrics": "la", "is_instrumental": True}),
    ("generate-music", {"prompt": "x", "lyrics": "la", "lyricsAddon": True}),
    ("generate-music", {"prompt": "x", "lyricsAbout": "sea"}),
    ("generate-music", {"prompt": "x", "audio_format": "flac"}),
    ("generate-music", {"prompt": "x", "lyricsAddon": True, "lyrics_optimizer": True}),
    ("generate-video", {"prompt": "x", "duration": 2}),
    ("generate-video", {"prompt": "x", "duration": 16}),
    ("generate-video", {"prompt": "x", "resolution": "4K"}),
    ("generate-video", {"prompt": "x", "mode": "ultra"}),
    ("generate-video", {"prompt": "x", "reference_audio": TEXT}),
    ("animate-image", {"prompt": "x"}),
    ("animate-image", {"prompt": "x", "image": PNG, "duration": 20}),
    ("extract-document", {"documentBase64": TEXT}),
    ("extract-document", {}),
    ("extract-document", {"documentBase64": PDF1, "modelId": 30}),
    ("extract-receipt", {"documentBase64": b64(pdf_bytes(51))}),
    ("convert-file", {"file": PDF1, "targetFormat": "docx"}),  # PDF converts to txt, png
    ("convert-file", {"file": PNG, "targetFormat": "docx"}),
    ("convert-file", {"file": b64(b"hello"), "targetFormat": "pdf"}),  # text needs fileName
    ("convert-file", {"file": b64(b"\xff\xfe\x00bin"), "fileName": "a.txt", "targetFormat": "pdf"}),
    (
        "e-signature",
        {
            "documentBase64": PDF1,
            "customerEmail": "me@example.org",
            "signers": [{"name": "A", "email": "not-an-email"}],
        },
    ),
    (
        "e-signature",
        {
            "documentBase64": PDF1,
            "customerEmail": "me@example.org",
            "signers": [
                {"name": "A", "email": "a@example.org"},
                {"name": "B", "email": "A@example.org"},
            ],
        },
    ),
    (
        "e-signature",
        {
            "documentBase64": PDF1,
            "customerEmail": "me@example.org",
            "signers": [{"name": f"S{i}", "email": f"s{i}@example.org"} for i in range(11)],
        },
    ),
    (
        "e-signature",
        {
            "documentBase64": PDF1,
            "customerEmail": "me@localhost",
            "signers": [{"name": "A", "email": "a@example.org"}],
        },
    ),
    (
        "e-signature",
        {
            "documentBase64": PNG,
            "customerEmail": "me@example.org",
            "signers": [{"name": "A", "email": "a@example.org"}],
        },
    ),
    ("e-signature", {"documentBase64": PDF1, "customerEmail": "me@example.org", "signers": []}),
    ("boardingpass-wallet", {"documents": [PNG] * 9}),  # up to 8
    ("boardingpass-wallet", {"documentBase64": PDF1, "documents": [PDF1]}),
    ("boardingpass-wallet", {}),
    ("boardingpass-wallet", {"documents": [PDF1, TEXT]}),
    ("send-email", {"to": "not an address", "subject": "s", "text": "t"}),
    ("send-email", {"to": "a@example.org", "subject": "s\nBcc: x@example.org", "text": "t"}),
    ("send-email", {"to": "a@example.org", "subject": "s"}),  # no body
    ("send-email", {"to": [f"a{i}@example.org" for i in range(11)], "subject": "s", "text": "t"}),
    ("send-email", {"to": ["a@example.org", "A@example.org"], "subject": "s", "text": "t"}),
    ("send-email", {"to": "a@example.org", "subject": "s", "text": "t", "replyTo": "nope"}),
    ("send-sms", {"phone_number": US, "message": "x" * 121}),
    ("send-sms", {"phone_number": "4155550123", "message": "hi"}),  # not E.164
    ("send-sms", {"phone_number": "+04155550123", "message": "hi"}),
    ("send-sms", {"phone_number": "+99912345678", "message": "hi"}),  # no route
    ("send-sms", {"phone_number": US, "message": ""}),
    ("send-sms", {"phone_number": US, "phoneNumber": US, "message": "hi"}),
    ("call", {"phone_number": US, "message": "hi", "duration_minutes": 11}),
    ("call", {"phone_number": US, "message": "hi", "language": "xx-YY"}),
    ("ai-call", {"phone_number": US}),
    ("ai-call", {"phone_number": US, "task": "t", "duration_minutes": 0}),
    ("ai-call", {"phone_number": US, "task": "t", "durationMinutes": 11}),
    ("ai-call", {"phone_number": US, "task": "t", "language": "en-XX"}),
    ("ai-call", {"phone_number": US, "task": "t", "voice": "Bob"}),
    ("ai-call", {"phone_number": US, "task": "t", "voicemail": "sing"}),
    ("ai-call", {"phone_number": US, "task": "t", "callback_number": "12345"}),
    ("ai-call", {"phone_number": US, "task": "t", "refund_address": "nope"}),
    ("ai-call", {"phone_number": US, "task": "t", "caller_name": "Ann\nBob"}),
    ("ai-call", {"action": "confirm", "session_id": "s1"}),  # a free confirmation, not a call
    ("send-fax", {"faxNumber": US, "documentBase64": b64(pdf_bytes(51))}),
    ("send-fax", {"faxNumber": US, "documentBase64": PNG}),
    ("send-fax", {"faxNumber": "555-1234", "documentBase64": PDF1}),
    ("receive-fax", {"country": "ZZ"}),
    ("receive-fax", {"forwardEmail": "nope"}),
    ("voice-bridge-open", {"phoneNumber": US, "durationMinutes": 61}),
    ("voice-bridge-open", {"phoneNumber": US, "codec": "g729"}),
    ("voice-bridge-open", {"phoneNumber": US, "refundAddress": "x"}),
    ("vote", {"slug": "generate-image"}),  # exists already: not planned
    ("vote", {}),
]


@pytest.mark.parametrize(
    ("slug", "body"), INVALID, ids=[f"{s}-{i}" for i, (s, _b) in enumerate(INVALID)]
)
async def test_invalid_bodies_are_refused_before_any_invoice(slug: str, body: Any) -> None:
    with pytest.raises(ApiError) as info:
        await quote(slug, body)
    assert info.value.code == "L402_INVALID_PARAMS", info.value.message
    assert info.value.refund is None


CALLBACK_REFUSED = [
    ("generate-3d-model", {"prompt": "chair", "callback_url": "https://127.0.0.1/cb"}),
    (
        "translate-epub",
        {
            "epubBase64": BOOK_SMALL,
            "targetLanguage": "es",
            "callback_url": "http://hooks.example.org/cb",
        },
    ),
    ("transcribe-audio", {"file": WAV30, "callbackUrl": "https://10.0.0.7/cb"}),
    (
        "transcribe-translate",
        {"file": WAV30, "targetLanguage": "es", "callback_url": "https://[::1]/cb"},
    ),
    (
        "epub-audiobook",
        {
            "epubBase64": BOOK_SMALL,
            "fileName": "b.epub",
            "callback_url": "https://169.254.169.254/latest",
        },
    ),
    ("generate-video", {"prompt": "x", "callback_url": "https://localhost/cb"}),
    ("animate-image", {"prompt": "x", "image": PNG, "callback_url": "https://192.168.0.2/"}),
]


@pytest.mark.parametrize(("slug", "body"), CALLBACK_REFUSED, ids=[s for s, _b in CALLBACK_REFUSED])
async def test_non_public_callback_urls_are_refused_before_payment(
    slug: str, body: dict[str, Any]
) -> None:
    with pytest.raises(ApiError) as info:
        await quote(slug, body)
    assert info.value.code == "L402_CALLBACK_INVALID"


def test_every_service_has_valid_and_invalid_cases() -> None:
    covered_valid = {slug for slug, _b, _p in VALID}
    covered_invalid = {slug for slug, _b in INVALID}
    untested = {"render-card", "html-to-pdf", "merge-pdf"}  # tested in test_gateway.py
    assert set(BY_SLUG) - untested <= covered_valid
    assert set(BY_SLUG) - untested <= covered_invalid


async def test_quote_does_not_decode_twice_and_is_stable() -> None:
    """prevalidate measures once; the quote at execution equals the 402 quote."""
    spec = BY_SLUG["transcribe-audio"]
    body = {"file": WAV61}
    first = validate_params(spec, body, FALLBACK)
    assert spec.prevalidate is not None
    await spec.prevalidate(first, PrecheckMemo())
    second = validate_params(spec, body, FALLBACK)  # a fresh request, as at execution
    assert spec.quote_sats(first, FALLBACK) == spec.quote_sats(second, FALLBACK) == 20
