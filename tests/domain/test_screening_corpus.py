"""The screen's rules over the phishing corpus (tests/screening_corpus.py): every
credential-phishing message is held, no ordinary message is, in each language and
channel; the rates are the ones docs/communications.md reports."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from satsgate.domain.plain_text import normalise
from satsgate.domain.screening_rules import check_text
from tests.screening_corpus import ORDINARY, PHISHING, Sample

DOC = Path(__file__).resolve().parents[2] / "docs" / "communications.md"
LANGUAGES = ("en", "de", "fr", "es", "it", "pt", "nl")


def _id(sample: Sample) -> str:
    return f"{sample.lang}-{sample.channel}-{normalise(sample.text)[:40].replace(' ', '_')}"


@pytest.mark.parametrize("sample", PHISHING, ids=_id)
def test_credential_phishing_is_held(sample: Sample) -> None:
    reasons = check_text(sample.text)
    assert "credential:code" in reasons, normalise(sample.text)


@pytest.mark.parametrize("sample", ORDINARY, ids=_id)
def test_ordinary_business_messages_pass(sample: Sample) -> None:
    assert check_text(sample.text) == (), normalise(sample.text)


def test_a_letterhead_naming_the_institution_counts_as_posing_as_it() -> None:
    """No "this is": the institution is named in the heading or the signature."""
    letter = PHISHING[0].text
    assert letter.startswith("NORTHBRIDGE BANK") and "this is" not in letter.lower()
    assert check_text(letter) == ("credential:code", "impersonation:authority")


def rates() -> tuple[int, int, int, int]:
    """(phishing held, phishing, ordinary held, ordinary)."""
    held = sum(1 for s in PHISHING if check_text(s.text))
    false_holds = sum(1 for s in ORDINARY if check_text(s.text))
    return held, len(PHISHING), false_holds, len(ORDINARY)


def test_the_corpus_covers_every_language_and_channel() -> None:
    for corpus in (PHISHING, ORDINARY):
        by_language = Counter(s.lang for s in corpus)
        assert set(by_language) == set(LANGUAGES) and min(by_language.values()) >= 5
    assert {s.channel for s in PHISHING} == {"sms", "email", "fax", "call", "ai_call"}


def test_hold_rate_is_100_percent_and_false_hold_rate_0_as_the_doc_reports() -> None:
    held, phishing, false_holds, ordinary = rates()
    assert (held, false_holds) == (phishing, 0)
    reported = (
        f"{held} of {phishing} phishing messages held ({held / phishing:.0%}), "
        f"{false_holds} of {ordinary} ordinary messages held ({false_holds / ordinary:.0%})"
    )
    text = " ".join(DOC.read_text().split())
    assert reported in text, f"docs/communications.md should say: {reported}"
    assert re.search(r"in English, German, French, Spanish, Italian, Portuguese and Dutch", text)
