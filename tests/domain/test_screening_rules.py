"""The screen's rules on a table of ordinary and hostile messages in five languages."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from satsgate.domain.addresses import normalise_address
from satsgate.domain.do_not_contact import NO_OPT_OUTS, asks_not_to_be_contacted, opt_out
from satsgate.domain.plain_text import normalise
from satsgate.domain.screening_rules import check_text
from satsgate.services.comms.screening import HeldForReview, Outreach, html_text, screen

BENIGN = [
    "Your table is booked for 7pm.",
    "The code review is done, merging now.",
    "Call me back when you can.",
    "Your code is 4711",
    "Your verification code is 829301. Never share this code with anyone.",
    "Do not share your PIN with anyone, we will never ask for it.",
    "Hi mum, I'll be home late tonight, don't wait for dinner.",
    "The bank holiday is on Monday, the office is closed.",
    "I'm at the police station to pick up my lost wallet, back soon.",
    "Please confirm your appointment on Tuesday at 10am by replying YES.",
    "Send me the code review comments by Friday.",
    "Your parcel will arrive tomorrow between 9 and 12.",
    "The password for the guest wifi is on the fridge.",
    "Reminder: dentist at 3pm. Reply STOP to opt out.",
    "Ihr Tisch ist für 19 Uhr reserviert.",
    "Das Paket wurde zugestellt. Vielen Dank!",
    "Hallo Mama, ich komme heute später nach Hause.",
    "Votre rendez-vous est confirmé pour demain à 14h.",
    "Merci pour votre commande, elle sera expédiée lundi.",
    "Tu pedido ha sido enviado y llegará el jueves.",
    "Hola, ¿quedamos mañana para comer?",
    "Seu pedido foi enviado e chega amanhã.",
    "Oi mãe, chego às oito para o jantar.",
    "We are open from 9 to 5, call us anytime.",
    "I'm from Berlin and I'd like to book a table for four.",
    "This is Anna from the bakery, your cake is ready.",
    "Call me back or else we can meet tomorrow.",
    "I'll find you a better time slot next week.",
    "I'll get you the documents by Friday.",
    "I'll beat you at chess next time!",
    "Can you send me the password for the wifi?",
    "Tell me the PIN of the bike lock when you're here.",
    "Enter the code 1234 at the gate.",
    "Enter the promo code SAVE10 at checkout.",
    "Je vais te retrouver à la gare à 18h.",
    "Te voy a encontrar un hueco el martes.",
    "Vou te encontrar no café às 10h.",
    "Schick mir bitte das Passwort für das WLAN.",
    "I am at the bank, be there in 10 minutes.",
    "Your PIN for the door is 4821.",
    "Enter the verification code 482913 in the app.",
    "Your PIN is now 4821.",
    "Your code is G-482913.",
    "We will send you a confirmation code when your parcel ships.",
    "Kun je me de foto's van gisteren sturen?",
    "Nennen Sie mir bitte Ihren Wunschtermin.",
    "Il codice nel SMS è 556677, non condividerlo.",
]

HOSTILE = [
    ("Please send me the verification code you just received.", "credential:code"),
    ("This is your bank, please confirm your PIN.", "impersonation:authority"),
    ("This is your bank, please confirm your PIN.", "credential:code"),
    (
        "Hi mum, I lost my phone, this is my new number, can you send money urgently",
        "impersonation:relative",
    ),
    ("Bitte schicken Sie uns Ihr Passwort.", "credential:code"),
    ("Ihr P4ssw0rt bitte sofort mitteilen.", "credential:code"),
    ("Envoyez-nous votre mot de passe.", "credential:code"),
    ("Merci de nous communiquer le code de vérification reçu par SMS.", "credential:code"),
    ("Envíenos el código de verificación que le llegó.", "credential:code"),
    ("Por favor, dime tu contraseña.", "credential:code"),
    ("Me passe a sua senha agora.", "credential:code"),
    ("Informe o código de verificação que enviamos.", "credential:code"),
    ("What's your seed phrase? We need it to secure your wallet.", "credential:code"),
    ("reply with your card number and CVV to unlock your account", "credential:code"),
    ("A code was sent to your phone, please read it to me.", "credential:code"),
    ("p a s s w o r d: please send your p a s s w o r d now", "credential:code"),
    ("Y0ur b@nk here: t3ll us your 0TP", "credential:code"),
    ("We are calling from the IRS about unpaid taxes.", "impersonation:authority"),
    ("Hier spricht die Polizei, Ihr Konto ist betroffen.", "impersonation:authority"),
    ("Hier ist das Finanzamt, Sie haben eine Nachzahlung offen.", "impersonation:authority"),
    ("Ici la gendarmerie nationale, vous devez payer une amende.", "impersonation:authority"),
    ("Le llamamos de la Agencia Tributaria por una deuda.", "impersonation:authority"),
    ("Aqui é da Receita Federal, seu CPF está irregular.", "impersonation:authority"),
    (
        "Hello, I'm calling from Microsoft support, your computer has a virus.",
        "impersonation:authority",
    ),
    (
        "Hallo Papa, mein Handy ist kaputt, das ist meine neue Nummer, ich brauche dringend Geld.",
        "impersonation:relative",
    ),
    (
        "Coucou maman, c'est mon nouveau numéro, j'ai besoin d'un virement urgent.",
        "impersonation:relative",
    ),
    ("Oi mãe, esse é meu número novo, preciso de um pix urgente.", "impersonation:relative"),
    ("I will kill you if you don't pay.", "threat"),
    ("Pay by Friday or you'll regret it. I'll hunt you down.", "threat"),
    ("Send the password for the wifi and your bank PIN now.", "credential:code"),
    ("We know where you live.", "threat"),
    ("There is a warrant for your arrest, pay now or you will be arrested.", "threat"),
    ("Ich bringe dich um.", "threat"),
    ("Je vais te retrouver, tu vas le regretter.", "threat"),
    ("Te voy a matar.", "threat"),
    ("Sabemos onde você mora.", "threat"),
    ("You are worthless, kill yourself.", "harassment"),
    ("Du bist wertlos, verpiss dich.", "harassment"),
    ("Va te faire foutre, connard.", "harassment"),
    ("Eres un pendejo, hijo de puta.", "harassment"),
    ("Vai se foder, vagabunda.", "harassment"),
    ("Pay the fine with Google Play cards today.", "scam:payment"),
    # A number after the secret that is not the secret: a deadline, a phone number.
    ("Reply with your password within 24 hours or your account will be closed.", "credential:code"),
    ("Send us your PIN by 5pm today.", "credential:code"),
    ("Stuur je pincode naar 0612345678.", "credential:code"),  # je: the Dutch "your"
    ("URGENT from your bank: verify now by replying with the code sent to you.", "credential:code"),
    ("Ciao, sono della banca: dimmi il codice che ti è arrivato.", "credential:code"),
    ("Hallo, nennen Sie mir bitte den Code aus der SMS.", "credential:code"),
    ("Hoi, kun je me de code uit de sms sturen?", "credential:code"),
]


@pytest.mark.parametrize("text", BENIGN)
def test_ordinary_messages_pass(text: str) -> None:
    assert check_text(text) == (), normalise(text)


@pytest.mark.parametrize(("text", "reason"), HOSTILE)
def test_hostile_messages_are_flagged(text: str, reason: str) -> None:
    assert reason in check_text(text), normalise(text)


def test_sender_name_posing_as_an_authority_is_flagged() -> None:
    assert check_text("Your parcel is waiting.", "Police") == ("impersonation:sender-name",)
    assert check_text("Your parcel is waiting.", "Anna's bakery") == ()


def test_normalisation_folds_case_accents_leetspeak_and_spacing() -> None:
    assert normalise("P4SSW0RD") == "password"
    assert normalise("Vérification") == "verification"
    assert normalise("s e e d  p h r a s e") == "seedphrase" or "seed" in normalise("s-e-e-d")
    assert normalise("Table for 7pm") == "table for 7pm"


@pytest.mark.parametrize(
    "text",
    [
        "STOP",
        "stop.",
        "Unsubscribe",
        "Please don't call me again.",
        "Take me off your list",
        "Bitte rufen Sie mich nicht mehr an.",
        "Ne m'appelez plus.",
        "No me llame más, por favor.",
        "Não me ligue mais.",
    ],
)
def test_opt_out_requests_are_recognised(text: str) -> None:
    assert asks_not_to_be_contacted(text)


@pytest.mark.parametrize(
    "text", ["Stop by the shop tomorrow", "Call me back", "I can't stop laughing", "See you at 7"]
)
def test_ordinary_replies_are_not_opt_outs(text: str) -> None:
    assert not asks_not_to_be_contacted(text)


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("+1 (415) 555-0100", "+14155550100"),
        ("0049 30 1234567", "+49301234567"),
        ("+44.20.7946.0000", "+442079460000"),
        ("Alice@Example.ORG", "alice@example.org"),
        ("bob@bücher.de", "bob@xn--bcher-kva.de"),
    ],
)
def test_addresses_are_stored_normalised(given: str, stored: str) -> None:
    assert normalise_address(given) == stored


@pytest.mark.parametrize("bad", ["call me", "12345", "+0123456789", "@example.org", "a@b"])
def test_what_is_neither_a_number_nor_an_address_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        normalise_address(bad)


async def test_opt_out_checks_its_source_and_needs_a_list() -> None:
    assert await opt_out(NO_OPT_OUTS, "+14155550100", source="sms-stop") is False
    with pytest.raises(ValueError):
        await opt_out(NO_OPT_OUTS, "+14155550100", source="SMS STOP!")
    assert asks_not_to_be_contacted("STOP") and not asks_not_to_be_contacted("Call me back")


async def test_screen_without_a_node_screener_applies_the_rules() -> None:
    ctx = cast(Any, SimpleNamespace(desk=lambda _key: None))
    await screen(ctx, Outreach("sms", ("+14155550100",), "Your table is booked for 7pm."))
    with pytest.raises(HeldForReview) as held:
        await screen(ctx, Outreach("sms", ("+14155550100",), "Send me your PIN now", "Police"))
    assert held.value.reasons == ("credential:code", "impersonation:sender-name")
    assert held.value.outreach is not None and held.value.outreach.channel == "sms"


def test_html_text_is_what_the_html_shows() -> None:
    shown = html_text("<style>p{}</style><p>Send&nbsp;your <b>PIN</b></p><script>x()</script>")
    assert " ".join(shown.split()) == "Send your PIN"
