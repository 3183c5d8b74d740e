# ruff: noqa: E501  (phrase tables: one phrase family per line reads better unbroken)
"""The screen's rules: impersonation, threats, harassment and credential or code
solicitation, in English, German, French, Spanish and Portuguese; credential phishing also
in Italian and Dutch.

Text is normalised before matching (:func:`satsgate.domain.plain_text.normalise`):
case-folded, accents removed, leetspeak inside words undone (``p4ssw0rd`` ->
``password``, ``b@nk`` -> ``bank``), letters spaced out to dodge a filter joined again
(``p a s s w o r d``), punctuation turned into spaces. Every rule is a phrase pattern
over that normal form, narrow on purpose: a rule names what the text DOES (asks for a
code, claims to be the police, threatens), never a single word that ordinary messages
use ("code", "bank", "police" alone pass: "the code review is done", "your table is
booked for 7pm", "your code is 4711" from a sender giving one).

:func:`check_text` returns labels such as ``credential:code``, ``impersonation:authority``,
``impersonation:relative``, ``threat``, ``harassment``, ``scam:payment``.

Credential phishing is held in two shapes: an ask next to the secret ("send me your PIN",
"Ihr Passwort bitte"), and a hand-back ask anywhere with the reader's secret anywhere in
the same message (a letterhead's form: "fax it back ... Online banking password: ___").
An institution named anywhere in such a message also gives ``impersonation:authority``.
The corpus in tests/screening_corpus.py measures both (docs/communications.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from satsgate.domain.plain_text import normalise


def _any(words: Iterable[str]) -> str:
    return "(?:" + "|".join(sorted(words, key=len, reverse=True)) + ")"


# -- credentials and codes ----------------------------------------------------------------

_SECRET = _any(
    [
        # en
        r"(?:one time|onetime|verification|verify|confirmation|security|authentication|auth|"
        r"login|log in|sign in|access|2fa|two factor|sms|otp|activation|reset|bank|whatsapp)"
        r" (?:code|pin|number|passcode)",
        r"otp",
        r"pass ?code",
        r"pass ?word",
        r"pin(?: code| number)?",
        r"seed(?: phrase| words)?",
        r"recovery (?:phrase|words|key|code)",
        r"(?:secret|private) key",
        r"mnemonic",
        r"(?:credit |debit )?card (?:number|details|pin|code)",
        r"cvv2?",
        r"cvc",
        r"security number on the back",
        r"login (?:details|credentials)",
        r"credentials",
        r"code (?:you|we|that was|that we) (?:just )?(?:received|got|sent|texted)",
        r"code (?:on|in|from) your (?:phone|screen|sms|text)",
        # de
        r"(?:bestatigungs|verifizierungs|sicherheits|einmal|zugangs|login|aktivierungs|sms)code",
        r"(?:bestatigungs|verifizierungs|sicherheits) ?nummer",
        r"passwort",
        r"kennwort",
        r"geheimzahl",
        r"tan(?: nummer)?",
        r"kartennummer",
        r"kreditkartennummer",
        r"prufziffer",
        r"wiederherstellungs(?:phrase|schlussel)",
        r"zugangsdaten",
        # fr
        r"code (?:de verification|de confirmation|de securite|a usage unique|unique|secret|"
        r"d'acces|d'activation|recu|sms|pin|confidentiel)",
        r"mot de passe",
        r"numero de (?:carte|cb)",
        r"cryptogramme",
        r"phrase de recuperation",
        r"identifiants",
        # es
        r"codigo (?:de verificacion|de confirmacion|de seguridad|de acceso|de un solo uso|"
        r"unico|sms|pin|que (?:te|le) (?:llego|enviamos|hemos enviado))",
        r"contrasena",
        r"clave(?: de acceso| secreta)?",
        r"numero de (?:la )?tarjeta",
        r"frase de recuperacion",
        # pt
        r"codigo (?:de verificacao|de confirmacao|de seguranca|de acesso|unico|sms|"
        r"que (?:te|lhe) (?:enviamos|chegou))",
        r"senha",
        r"numero do cartao",
        r"frase de recuperacao",
        r"codigo (?:de \d+ digitos|recebido|enviado)",
        # it
        r"codice (?:pin|otp|segreto|di verifica|di sicurezza|di conferma|di accesso|"
        r"di attivazione|monouso|usa e getta|dispositivo|ricevuto|sms|di \d+ cifre)",
        r"(?:numero|codice) (?:della |di )?carta(?: di credito)?",
        r"credenziali(?: di accesso)?",
        r"frase di recupero",
        r"parola d'ordine",
        # nl
        r"wachtwoord",
        r"pin ?code",
        r"(?:inlog|verificatie|beveiligings|bevestigings|toegangs|activerings|sms|eenmalige) ?code",
        r"\d+ cijferige code",
        r"kaartnummer",
        r"inloggegevens",
        r"herstelzin",
        # any language: "the 6-digit code", "6-stelligen Code", "code a 6 chiffres"
        r"(?:\d+|four|six|eight|vier|sechs|acht|quatre|huit|cuatro|seis|ocho|quattro|sei|otto|"
        r"quatro|oito|zes) ?(?:digit|stellige[nr]?|chiffres?|digitos|cifre|cijferige) "
        r"(?:code|pin|number|nummer|codigo|codice)",
        # the code the sender just sent (the reader's, to be handed back)
        r"code (?:that )?(?:\w+ ){0,4}?(?:received|receive|got|sent|texted|arrived)",
        r"code(?:,)? (?:den|die) (?:\w+ ){0,5}?(?:geschickt|gesendet|erhalten|bekommen|zugeschickt)",
        r"code (?:que|qui) (?:\w+ ){0,5}?(?:recevoir|recu|envoye|arrive)",
        r"codigo (?:que )?(?:\w+ ){0,4}?(?:llegado|llego|recibido|recibira|enviado|enviamos|chegou|"
        r"recebeu|recebido)",
        r"codice (?:che )?(?:\w+ ){0,4}?(?:ricevuto|arrivato|inviato|ricevera)",
        r"code(?: \w+)? die (?:\w+ ){0,6}?(?:ontvangen|ontvangt|gekregen|gestuurd|ontving|kreeg)",
        # the code in the text message just received
        r"code (?:aus|in) (?:der|ihrer|deiner) sms",
        r"code (?:du|de l'|de votre|dans le) sms",
        r"codigo (?:del|do|en el|no) sms",
        r"codice (?:del|dell'|nell'|nel) sms",
        r"code (?:uit|in) (?:de|uw|je) sms",
        r"code (?:in|from) (?:the )?(?:sms|text message|text)",
        r"code a \d+ chiffres",
        r"(?:online|internet|mobile|web) ?banking (?:password|passwort|pin|login|code)",
        r"memorable (?:word|information)",
        r"passphrase",
        r"(?:user ?name|benutzername) and password",
        r"(?:m|push|sms|chip|photo)tan",
        r"einmal ?passwort",
        r"(?:kartenprufnummer|anmeldedaten)",
        r"one time pass(?:word|code)",
    ]
)

_ASK = _any(
    [
        # en
        r"send(?: us| me)?",
        r"text(?: us| me)?",
        r"tell(?: us| me)?",
        r"give(?: us| me)?",
        r"share",
        r"reply with",
        r"respond with",
        r"read (?:me|us|out)",
        r"forward(?: us| me)?",
        r"provide",
        r"confirm",
        r"enter",
        r"type in",
        r"verify",
        r"what is your",
        r"what's your",
        r"need your",
        r"we need",
        r"i need",
        # de
        r"(?:schick|send|nenn|gib|geben|teil|sag|bestatig|ubermittel|antwort)(?:e|en|t)?(?: sie| du)?(?: uns| mir)?",
        r"mitteilen",
        r"durchgeben",
        r"weiterleiten",
        r"brauchen (?:ihr|dein|den|die)",
        r"wie lautet",
        # fr
        r"(?:envoy|donn|communiqu|indiqu|transmet|confirm|repond|partag|lis|dict)(?:ez|er|e|es|ons)?(?:[ -]?(?:nous|moi))?",
        r"quel est votre",
        r"avons besoin de",
        # es
        r"envia(?:me|nos)?",
        r"envie(?:me|nos)?",
        r"mandame",
        r"mande(?:me|nos)?",
        r"dime",
        r"dinos",
        r"digame",
        r"diganos",
        r"dame",
        r"deme",
        r"danos",
        r"pasame",
        r"comparte",
        r"comparta",
        r"confirma",
        r"confirme",
        r"responde(?: con)?",
        r"responda(?: con)?",
        r"proporcione(?:nos)?",
        r"facilite(?:nos)?",
        r"indiquenos",
        r"cual es (?:tu|su)",
        r"necesitamos",
        # pt
        r"(?:me |nos )?envie",
        r"(?:me |nos )?envia",
        r"(?:me |nos )?mande",
        r"(?:me |nos )?manda",
        r"(?:me |nos )?diga",
        r"(?:me |nos )?passe",
        r"(?:me |nos )?passa",
        r"informe",
        r"compartilhe",
        r"confirme",
        r"responda(?: com)?",
        r"forneca",
        r"qual (?:e|eh) (?:a sua|o seu|sua|seu)",
        r"precisamos",
        # it
        r"(?:invi|mand|comunic|indic|fornisc|forni|conferm|inser|rispond|dic|legg|trasmett|condivid)"
        r"(?:a|i|ate|ete|ite|ere|iamo)?(?:ci|mi)?",
        r"ci (?:invii|mandi|comunichi|dica|fornisca|indichi)",
        r"qual e (?:la sua|il suo|la tua|il tuo)",
        r"abbiamo bisogno (?:del|della|di)",
        # nl
        r"stuur(?:t u)?(?: ons| mij| me)?",
        r"geef(?:t u)?(?: ons| mij| me)?(?: door)?",
        r"deel",
        r"bevestig",
        r"vul (?:uw|je)",
        r"voer (?:uw|je)",
        r"vertel(?: ons| mij| me)?",
        r"wat is (?:uw|je)",
        r"hebben (?:uw|je) \w+ nodig",
    ]
)
# A code or password of a shared thing (the wifi, a door, a locker) is not the reader's.
_SHARED_THING = (
    r"(?! (?:for|of|to|at|on|fur|vom|von|des|du|de|del|da|do|pour|para) (?:the |our |my |der |die |das |den |dem |le |la |l'|el |a |o |mi |mon |ma |meu |minha )?"
    r"(?:wifi|wi fi|wlan|guest|door|front door|gate|garage|locker|building|alarm|bike|lock|"
    r"haustur|tur|tor|porte|portail|puerta|porta|portao|casa|house|office|buro))"
)
_NEGATED = re.compile(
    r"\b(?:never|not|don't|dont|niemals|nie|nicht|keinesfalls|jamais|ne|n'|nunca|no|nao)"
    r"(?: \w+)?$"
)
# ask ... (the reader's) secret, a few words apart within one sentence.
_CREDENTIAL = re.compile(
    rf"\b{_ASK} (?:\w+ ){{0,3}}?(?:your |ihr |ihre |ihren |dein |deine |deinen |votre |vos |ton |ta |tu |su |sus |seu |sua |o seu |a sua |the |den |die |das |le |la |el |o |a |us |me |uns |mir |nous |moi |nos |la sua |il suo |il |lo |i |le |uw |je |de |het |ons )?{_SECRET}\b{_SHARED_THING}"
)
# "send me the code", "read me that code": the code itself, right after the ask.
_ASK_CODE = re.compile(
    rf"\b{_ASK} (?:me |us |mir |uns |moi |nous )?(?:the|that|this|den|diesen|le|ce|el|ese|este|o|esse) "
    r"(?:code|codigo|pin)\b(?! review| base| of conduct| snippet| repository| change| sample)"
    r"(?! \S*\d)" + _SHARED_THING  # "enter the code 1234 at the gate": the sender gives the code
)
# "your password please", "Ihre PIN bitte", "votre code de verification svp".
_ASKED_FOR = re.compile(
    rf"\b(?:your|ihr|ihre|ihren|dein|deine|votre|ton|ta|tu|su|seu|sua) {_SECRET} "
    r"(?:please|pls|plz|bitte|svp|s'il vous plait|por favor|por gentileza|asap|now|jetzt|sofort|maintenant|ahora|agora)\b"
)
_CODE_SENT_TO_YOU = re.compile(
    r"\b(?:a|an|the|ein|einen|un|une|um|uma) (?:\w+ )?(?:code|codigo|pin) "
    r"(?:(?:was|has been|will be|is) )?(?:sent|texted|wurde|a ete|fue|foi|enviado|envoye)\b"
    r"[^.]{0,80}\b(?:send|tell|give|read|forward|reply|share|schick|nenn|sag|envoy|donn|dig|envi|mand|pass|diga|compart)\w*\b"
)


# German puts the verb last: "Ihr Passwort bitte (uns) schicken", "PIN sofort mitteilen".
_SECRET_THEN_ASK = re.compile(
    rf"\b{_SECRET} (?:(?:bitte|please|uns|mir|sofort|jetzt|hier|per sms|umgehend|now) ){{0,3}}"
    r"(?:schicken|senden|zusenden|mitteilen|nennen|angeben|durchgeben|bestatigen|eingeben|"
    r"weiterleiten|send|share|envoyer|communiquer|enviar|compartir|passar|informar)\b"
)


# -- a secret handed back, anywhere in the message ------------------------------------------

# Asking the reader to hand something back to the sender: return, send back, fax back,
# reply with, read out, tell us, give us. The secret it asks for may be anywhere in the
# same message (a letterhead's form: "fax back this page with: 1. ... 4. your password").
_HAND_BACK = re.compile(
    r"\b(?:"
    # en
    r"(?:fax|send|mail|post|text|email|e mail)(?: \w+){0,3}? "
    r"(?:back|to us|to me|to our \w+|to this number|to the number|by fax|via fax)"
    r"|fax us|text us|email us|e mail us|message us"
    r"|return (?:it |them |this(?: \w+)? |the (?:\w+ )?form )?(?:to us|with|by fax|completed)"
    r"|(?:reply|replying|respond|responding|answer|write back|call us(?: back)?) "
    r"(?:to this \w+ )?with"
    r"|read (?:it |them |us |me )?(?:out|back|to us|to me|aloud)"
    r"|(?:tell|give|forward|provide) (?:it to )?(?:us|me)(?! a (?:call|ring|moment))"
    r"|ask (?:them|him|her|the \w+) (?:to|for)|get (?:them|him|her) to (?:tell|read|give)"
    r"|share (?:it |them |this \w+ )?with (?:us|me|our \w+)"
    r"|(?:send|forward|submit|provide|include|enter|type|confirm|write(?: down)?|fill in|"
    r"state|sending|providing|entering|confirming|submitting|sharing|giving us) "
    r"(?:us |me )?(?:your|the (?:following|requested))"
    # de
    r"|(?:zuruck|ruck)(?:faxen|senden|schicken|mailen)"
    r"|(?:faxen|senden|schicken|mailen|ubermitteln) sie"
    r"|(?:geben|nennen|teilen|diktieren|sagen) sie (?:uns|mir)"
    r"|(?:geben|teilen|lesen) sie (?:\w+ ){0,8}?(?:an|mit|vor|durch)\b"
    r"|per fax (?:an uns |zuruck ?)?(?:senden|schicken|ubermitteln)"
    r"|(?:mitteilen|durchgeben|angeben|eintragen|vorlesen|ubermitteln)"
    r"|antworten sie (?:uns )?mit"
    # fr
    r"|(?:renvoy|retourn|fax|envoy|communiqu|transmet|indiqu|donn|dict|lis|saisiss|confirm|"
    r"remplis|renseign)(?:ez|er)(?:[ -]?(?:nous|moi|le|la|les))?"
    r"|(?:repondez|repondre)(?: nous)?(?: a (?:ce|cet|cette) \w+)? (?:avec|en indiquant|en precisant)"
    r"|en (?:indiquant|precisant|communiquant|renvoyant|transmettant|envoyant|retournant)"
    r"|(?:me|nous) (?:lire|donner|communiquer|dicter|transmettre|envoyer|indiquer|confirmer|"
    r"faxer|renvoyer|retourner)"
    r"|par fax"
    # es
    r"|(?:devuelv|reenvi|envi|mand|comuniqu|indiqu|facilit|proporcion|dict|introduzc|rellen|"
    r"confirm)(?:e|a|en|enos|anos|emelo|enoslo)\b"
    r"|(?:digame|diganos|lea(?:nos)?|dictenos)"
    r"|responda (?:a este \w+ )?con"
    r"|por fax"
    # it
    r"|(?:rispedisc|restituisc|rinvi|invi|mand|comunic|fornisc|indich|inserisc|conferm|compil|"
    r"trasmett)(?:a|i|ate|ete|ite)(?:ci|celo|mi)?\b"
    r"|(?:ci|mi) dica|diteci|leggete(?:ci)?|ce (?:lo |la )?legga|(?:mi|ci) legga"
    r"|dimmi|dammi|mandami|inviami|leggimi|passami|dettami|dicci|mandaci|inviaci"
    r"|(?:fatti|fatevi|si faccia|farsi) (?:comunicare|dire|dare|dettare|leggere|inviare|mandare)"
    r"|chiedi(?:gli|le)? (?:di|il|la|i|le)"
    r"|rispond(?:a|ete) (?:a questo \w+ )?con"
    r"|via fax|per fax"
    # pt
    r"|(?:devolv|reenvi|envi|mand|forne[cç]|digit|insir|confirm|preench|encaminh)"
    r"(?:e|a|em)(?: nos| me)?\b"
    r"|(?<!vous )(?<!nous )(?<!te )(?<!le )(?<!la )informe\b"
    r"|(?:diga|leia)(?: nos| me)?"
    r"|responda (?:a esta \w+ )?com"
    # nl
    r"|(?:terug)?(?:stuur|zend|fax|mail)(?:t u|en)?(?: ons| mij)?(?: \w+){0,6}? terug"
    r"|(?:stuur|zend|fax|mail|geef|deel|vertel)(?:t u)? (?:ons|mij)(?! een (?:belletje|seintje))"
    r"|terug(?:sturen|faxen|zenden|mailen)"
    r"|retourneer|doorgeven|geef (?:\w+ ){0,6}?door|lees (?:\w+ ){0,6}?voor|voorlezen"
    r"|vul (?:\w+ ){0,6}?in|voer (?:\w+ ){0,6}?in|invullen|bevestig|verstrek"
    r"|antwoord (?:op dit \w+ )?met"
    r"|(?:kun|kunt|wil|wilt) (?:je|u) (?:me|mij|ons) (?:\w+ ){0,6}?"
    r"(?:sturen|geven|doorgeven|vertellen|voorlezen|noemen|mailen|faxen)"
    r")"
)
# The reader's secret, with a shared thing's (the wifi's) left out.
_SECRET_MENTION = re.compile(rf"\b{_SECRET}\b{_SHARED_THING}")
# ... which the sender gives (``code is 482913``, ``Code: 4711``) or will deliver (``your
# new PIN will be sent by post``): not asked for.
_GIVEN = re.compile(
    r"^(?: \.)?(?: (?:is|ist|lautet|est|es|e|eh|luidt|=|:))?"
    r"(?: (?:now|jetzt|maintenant|ahora|agora|ora|nu))? \S*\d"
    # a notice about the secret: "password reset", "Ihr Passwort wurde geandert"
    r"|^ (?:reset|change|changed|update|updated|expir\w*|zurucksetz\w*|anderung|geandert|"
    r"reinitialis\w*|modifi\w*|restablec\w*|cambi\w*|redefin\w*|alterad\w*|wijzig\w*|"
    r"gewijzigd|wurde geandert|was changed|has been changed|a ete modifie)"
    # said not to be needed: "your password is not required", "remain unchanged"
    r"|^ (?:\w+ ){0,2}?(?:is|are|will be|wird|n'est|ne sera|no es|non e|nao e|is|blijft|remains?) "
    r"(?:not|never|nicht|nie|pas|jamais|no|non|nao|niet|nooit|unchanged|unverandert|gelijk)"
    r"|^ (?:and \w+ )?remain unchanged"
    # delivered by the sender: "your PIN will follow by post", "die PIN erhalten Sie mit"
    r"|^ (?:will follow|follows|will arrive|arrives|erhalten sie|bekommen sie|folgt|kommt|"
    r"suivra|arrivera|vous parviendra|llegara|recibira|seguira|arrivera|ricevera|seguira|"
    r"chegara|recebera|volgt|ontvangt u|komt)"
    r"|^ (?:will be|wird|sera|sara|sera enviado|wordt|is being|has been|was) "
    r"(?:\w+ ){0,3}?(?:sent|mailed|posted|delivered|zugeschickt|zugesandt|gesendet|envoye|"
    r"enviado|inviato|verstuurd|toegestuurd|opgestuurd)"
)
# Choosing a new secret is not handing one over ("enter a new password").
_NEW_SECRET = re.compile(
    r"\b(?:new|neue[snrm]?|nouve(?:au|l|lle)|nuev[oa]|nuov[oa]|nov[oa]|nieuwe?)\b"
)
_NEGATION = re.compile(
    r"\b(?:never|not|don't|dont|do not|no one|nobody|niemals|nie|nicht|keinesfalls|kein|keine|"
    r"jamais|ne|n'|pas|nunca|jamas|mai|non|nooit|niet|geen|nao)\b"
    r"|\bno (?:\w+ )?(?:compart|envi|reenvi|revel|facilit|proporcion|d[ae]|dig|pid|ped|solicit|"
    r"lo|la|le|te|se|nos)\w*"
)


_CLITIC = r"(?: (?:it|them|this|that|lo|la|le|les|li|gli|ihn|es|ce|het|o|a|lhe|me|te|nos|us))?$"


def _negated(plain: str, start: int, words: int) -> bool:
    """A negation before ``start`` in the same sentence: right before an ask, with at most
    a pronoun between ("never share", "ne le communiquez", ``words`` 0); within ``words``
    words before a secret ("we will never ask for your password": 3). A negation further
    back governs something else ("if this was not you, reply with ...")."""
    before = plain[max(0, start - 80) : start].rsplit(" . ", 1)[-1].split()
    if words == 0:
        return bool(re.search(rf"(?:{_NEGATION.pattern}){_CLITIC}", " ".join(before[-2:])))
    return bool(_NEGATION.search(" ".join(before[-(words + 1) :])))


# Words right before a secret that make it the reader's to choose, to keep using, or a
# shared thing's: "choose a password", "log in with your own password", "the Wi-Fi
# password".
_NOT_HANDED = re.compile(
    r"\b(?:choose|set|create|pick|set up|wahlen sie|vergeben sie|choisissez|creez|elija|cree|"
    r"scegli|scelga|crei|escolha|crie|kies|maak)(?: \w+){0,3} $"
    r"|\b(?:use|using|utilisez|utiliser|verwenden sie|nutzen sie|usa|usi|utilice|usando|"
    r"gebruik|log (?:\w+ )?in with|sign in with|inloggen met|log (?:\w+ ){0,2}in met)(?: \w+){0,3} $"
    r"|\b(?:own|usual|eigenen?|eigen|propre|habituel|propia|habitual|propria|solita)(?: \w+)? $"
    r"|\b(?:wifi|wi fi|wlan|guest|door|gate|locker|alarm|network|router|meeting|conference)"
    r"(?: \w+)? $"
)
# A warning's sentence: "we will never ask you to tell us your password or PIN", "Wir
# werden Sie niemals nach Ihrem Passwort oder Ihrer TAN fragen", "never share your PIN".
_WARNING = re.compile(
    r"\b(?:never|nie|niemals|keinesfalls|jamais|nunca|jamas|mai|nooit|nao)(?: \w+){0,3} "
    r"(?:ask|request|share|disclose|reveal|tell|give|send|bitten|auffordern|demand|communiqu|"
    r"partag|divulg|pedir|pedire|pedimos|solicit|compart|revel|chied|condivid|comunic|vrag|"
    r"vraag|delen|deel|geef|pedira)"
    # German puts the verb last: "niemals nach Ihrem Passwort oder Ihrer TAN fragen"
    r"|\b(?:nie|niemals|keinesfalls)(?: \w+){0,8} (?:fragen|weitergeben|nennen|mitteilen|"
    r"preisgeben|herausgeben)\b"
)


def _in_a_warning(plain: str, match: re.Match[str]) -> bool:
    """The secret's sentence warns never to hand it over (the ask before or after it)."""
    start = plain.rfind(" . ", 0, match.start())
    end = plain.find(" . ", match.end())
    sentence = plain[start + 1 if start >= 0 else 0 : end if end >= 0 else len(plain)]
    return bool(_WARNING.search(sentence))


def _asked_secret(plain: str, match: re.Match[str]) -> bool:
    """A secret mention the message does not give, negate, warn about, renew, leave to
    the reader's own use, or that is a shared thing's."""
    before = plain[max(0, match.start() - 40) : match.start()]
    return not (
        _GIVEN.search(plain[match.end() : match.end() + 40])
        or _negated(plain, match.start(), 3)
        or _NEW_SECRET.search(before[-12:])
        or _NOT_HANDED.search(before)
        or _in_a_warning(plain, match)
    )


def _hands_over(plain: str) -> bool:
    """Asked to hand something back, and a secret asked for, anywhere in the message."""
    asks = any(not _negated(plain, m.start(), 0) for m in _HAND_BACK.finditer(plain))
    return asks and any(_asked_secret(plain, m) for m in _SECRET_MENTION.finditer(plain))


def _asks(pattern: re.Pattern[str], plain: str) -> bool:
    """A match not negated just before it ("never share this code"), whose secret the
    message does not give itself ("enter the verification code 482913") nor choose anew
    ("enter a new password")."""
    for m in pattern.finditer(plain):
        if _NEGATED.search(plain[max(0, m.start() - 30) : m.start()].rstrip()):
            continue
        if _GIVEN.search(plain[m.end() : m.end() + 40]) or _NEW_SECRET.search(m.group(0)):
            continue
        if _TO_THE_READER.match(m.group(0)) or _in_a_warning(plain, m):
            continue
        return True
    return False


# "we will send you a confirmation code": the sender gives, the reader is not asked.
_TO_THE_READER = re.compile(r"\S+ (?:you|ihnen|dir|vous|te|lhe|u|ti|vi|voce|usted|a voce)\b")


def _credential(plain: str) -> bool:
    return (
        _asks(_CREDENTIAL, plain)
        or _asks(_ASK_CODE, plain)
        or bool(_ASKED_FOR.search(plain))
        or _asks(_CODE_SENT_TO_YOU, plain)
        or _asks(_SECRET_THEN_ASK, plain)
        or _hands_over(plain)
    )


# -- impersonation ----------------------------------------------------------------------

_AUTHORITY = _any(
    [
        # en
        r"(?:your |the )?bank(?:'s)? (?:fraud|security)(?: department| team)?",
        r"(?:your|the) bank",
        r"(?:the |local )?police(?: department| station| officer)?",
        r"(?:an? )?(?:police )?officer",
        r"(?:the )?sheriff(?:'s office)?",
        r"(?:the )?fbi",
        r"(?:the )?irs",
        r"(?:the )?hmrc",
        r"(?:the )?tax (?:office|authority|department|agency)",
        r"(?:the )?revenue service",
        r"(?:the )?(?:federal )?government",
        r"(?:the )?social security(?: administration)?",
        r"medicare",
        r"(?:the )?immigration(?: office| service)?",
        r"(?:the )?customs(?: office)?",
        r"(?:the )?court",
        r"(?:the )?(?:microsoft|apple|amazon|google|paypal|windows|netflix) (?:support|security|technical|team|help ?desk)",
        r"(?:the )?(?:tech|technical|it|computer) support",
        r"(?:the )?fraud (?:department|team|prevention)",
        # de
        r"(?:die |der |ihre |ihrer |deine |deiner )?(?:haus)?bank",
        r"(?:die |der )?(?:bundes|kriminal|landes)?polizei",
        r"(?:das |dem )?finanzamt",
        r"(?:die |der )?steuerbehorde",
        r"(?:das |dem )?bundeszentralamt",
        r"(?:der |die )?zoll",
        r"(?:das |dem )?gericht",
        r"(?:der |die )?staatsanwaltschaft",
        r"(?:der |die |dem )?(?:microsoft|apple|amazon|paypal) ?(?:support|kundendienst|sicherheit)",
        r"(?:der |dem )?technische(?:n|r)? (?:support|kundendienst)",
        # fr
        r"(?:la |votre |ta )?banque",
        r"(?:la )?(?:police|gendarmerie)(?: nationale)?",
        r"(?:les |le )?(?:impots|fisc|tresor public)",
        r"(?:la )?douane",
        r"(?:le )?tribunal",
        r"(?:le )?support (?:technique|microsoft|apple)",
        r"(?:l'|le )?(?:assurance maladie|caf|ameli)",
        # es
        r"(?:el |su |tu )?banco",
        r"(?:la )?(?:policia|guardia civil)(?: nacional)?",
        r"(?:la )?(?:agencia tributaria|hacienda)",
        r"(?:la )?aduana",
        r"(?:el )?juzgado",
        r"(?:el )?soporte tecnico",
        r"(?:la )?seguridad social",
        # pt
        r"(?:o |seu |teu )?banco",
        r"(?:a )?(?:policia|guarda)(?: federal| civil| militar| nacional)?",
        r"(?:a )?receita federal",
        r"(?:as )?financas",
        r"(?:o )?tribunal",
        r"(?:o )?suporte tecnico",
    ]
)
_CLAIM = _any(
    [
        # en
        r"this is",
        r"it is",
        r"it's",
        r"we are",
        r"we're",
        r"i am",
        r"i'm",
        r"i am calling from",
        r"i'm calling from",
        r"we are calling from",
        r"calling from",
        r"calling on behalf of",
        r"writing from",
        r"on behalf of",
        r"message from",
        r"notice from",
        r"alert from",
        r"here is",
        # de
        r"hier ist",
        r"hier spricht",
        r"wir sind",
        r"ich bin",
        r"ich rufe (?:im auftrag )?(?:von|vom|der|des) ",
        r"im auftrag (?:von|der|des|ihrer)",
        r"nachricht (?:von|vom|der|ihrer)",
        r"mitteilung (?:von|vom|der|ihrer)",
        r"wir rufen (?:von|vom|im auftrag)",
        # fr
        r"ici",
        r"c'est",
        r"nous sommes",
        r"je suis",
        r"je vous appelle de(?: la| le)?",
        r"de la part de",
        r"message de",
        r"au nom de",
        # es
        r"aqui",
        r"le habla",
        r"le llamamos de(?:sde)?",
        r"le llamo de(?:sde)?",
        r"somos",
        r"soy",
        r"llamamos de(?:sde)?",
        r"mensaje de",
        r"en nombre de",
        r"de parte de",
        # pt
        r"aqui e",
        r"aqui fala",
        r"falamos (?:do|da)",
        r"somos",
        r"sou",
        r"estou ligando (?:do|da|de)",
        r"ligamos (?:do|da|de)",
        r"mensagem (?:do|da|de)",
        r"em nome (?:do|da|de)",
    ]
)
_IMPERSONATE = re.compile(rf"(?:^|\b){_CLAIM} (?:from |von |vom |de |del |do |da )?{_AUTHORITY}\b")
_RELATIVE = re.compile(
    r"\b(?:"
    # en
    r"hi (?:mum|mom|mummy|mommy|dad|daddy|grandma|grandpa|granny)\b.{0,80}\b(?:new (?:number|phone)|lost my phone|broke my phone|phone (?:broke|is broken)|emergency|urgent|need (?:money|help)|send money)"
    r"|it'?s (?:me )?your (?:son|daughter|grandson|granddaughter|nephew|niece)\b.{0,80}\b(?:money|emergency|trouble|urgent|accident|hospital|jail|bail)"
    r"|(?:this is|it'?s) my new (?:number|phone)\b.{0,80}\b(?:money|transfer|pay|emergency|urgent|help)"
    r"|i'?(?:ve| have) (?:lost|broken) my phone\b.{0,80}\b(?:money|transfer|pay|urgent)"
    # de
    r"|hallo (?:mama|papa|mami|papi|oma|opa)\b.{0,80}\b(?:neue nummer|handy (?:ist )?kaputt|handy verloren|notfall|dringend|geld|uberweis)"
    r"|(?:das ist|dies ist) meine neue nummer\b.{0,80}\b(?:geld|uberweis|notfall|dringend|zahl)"
    # fr
    r"|(?:salut|coucou|bonjour) (?:maman|papa|mamie|papi)\b.{0,80}\b(?:nouveau numero|telephone (?:est )?casse|perdu mon telephone|urgence|urgent|argent|virement)"
    r"|c'est mon nouveau numero\b.{0,80}\b(?:argent|virement|urgence|urgent|payer)"
    # es
    r"|hola (?:mama|papa|abuela|abuelo)\b.{0,80}\b(?:nuevo numero|numero nuevo|movil (?:se )?(?:rompio|roto)|perdi (?:el|mi) movil|emergencia|urgente|dinero|transferencia)"
    r"|(?:este es|es) mi (?:nuevo numero|numero nuevo)\b.{0,80}\b(?:dinero|transferencia|urgente|emergencia|pagar)"
    # pt
    r"|oi (?:mae|pai|vo|vovo)\b.{0,80}\b(?:numero novo|novo numero|celular quebrou|perdi (?:o|meu) celular|emergencia|urgente|dinheiro|pix|transferencia)"
    r"|(?:esse|este) e (?:o )?meu (?:numero novo|novo numero)\b.{0,80}\b(?:dinheiro|pix|transferencia|urgente|pagar)"
    r")"
)
_AUTHORITY_NAME = re.compile(
    r"\b(?:bank|banque|banco|police|polizei|policia|gendarmerie|irs|hmrc|finanzamt|"
    r"tax office|government|regierung|gouvernement|gobierno|governo|fbi|interpol|court|"
    r"gericht|tribunal|customs|zoll|douane|aduana|microsoft|apple|paypal|amazon|"
    r"support|hacienda|receita|impots|social security|medicare)\b"
)


# An institution named anywhere (a letterhead, a heading, a signature): with a secret asked
# for, the message poses as it ("Northbridge Bank - Fraud Prevention ... fax back your PIN").
# Named alone it is ordinary ("the bank holiday is on Monday").
_INSTITUTION = re.compile(
    r"\b(?:bank(?:ing)?|banque|banco|banca|sparkasse|volksbank|raiffeisen\w*|postbank|"
    r"credit union|caisse d'epargne|credit agricole|societe generale|bnp paribas|la poste|"
    r"deutsche bank|commerzbank|unicredit|intesa(?: sanpaolo)?|poste italiane|santander|bbva|"
    r"caixa(?:bank)?|bradesco|itau|nubank|millennium bcp|ing|rabobank|abn amro|sns|bunq|"
    r"revolut|n26|chase|barclays|hsbc|lloyds|natwest|wells fargo|citi(?:bank)?|"
    r"bank of america|american express|amex|visa|mastercard|paypal|amazon|apple|microsoft|"
    r"google|netflix|coinbase|binance|kraken|ledger|trezor|dhl|ups|fedex|"
    r"police|polizei|policia|polizia|politie|gendarmerie|carabinieri|guardia (?:civil|di finanza)|"
    r"irs|hmrc|finanzamt|tax (?:office|authority|department)|agenzia delle entrate|"
    r"agencia tributaria|hacienda|receita federal|belastingdienst|impots|social security|"
    r"fraud (?:department|prevention|team|unit)|security (?:department|team)|"
    r"betrugs(?:abteilung|pravention)|sicherheitsabteilung|service (?:des fraudes|securite)|"
    r"departamento de (?:fraude|seguridad)|ufficio antifrode|fraudeafdeling|"
    r"customer (?:service|support)|kundendienst|kundenservice|service client|"
    r"servicio al cliente|servizio clienti|klantenservice)\b"
)


# -- threats and harassment ---------------------------------------------------------------

_THREAT = re.compile(
    r"\b(?:"
    # en
    r"i(?:'ll| will| am going to|'m going to|m gonna|'m gonna) (?:kill|hurt|shoot|stab|destroy|ruin|hunt|strangle|make) you(?! a\b| an\b| the\b| some\b)"
    r"|we(?:'ll| will| are going to) (?:kill|hurt|shoot|destroy|ruin|come for|hunt|make) you(?! a\b| an\b| the\b| some\b)"
    r"|(?:i|we)(?:'ll| will) (?:hunt you down|make you (?:pay|suffer|regret))"
    r"|you(?:'ll| will) (?:regret|pay for) (?:this|it)"
    r"|you(?:'re| are) (?:dead meat|going to die|gonna die)"
    r"|(?:we|i) know where you (?:live|work|sleep)"
    r"|watch your back"
    r"|or (?:else )?you(?:'ll| will) (?:be sorry|die|get hurt|regret it)"
    r"|(?:warrant|arrest warrant) (?:for|out for) your arrest"
    r"|you (?:will|are going to) be arrested"
    r"|your (?:family|children|kids|wife|husband) (?:will|are going to) (?:pay|suffer|get hurt|be hurt)"
    # de
    r"|ich (?:bringe|bring|werde) dich (?:um|umbringen|toten|fertigmachen)"
    r"|ich mach dich (?:fertig|kalt)"
    r"|(?:du wirst|sie werden) es bereuen"
    r"|(?:wir wissen|ich weiss) wo (?:du wohnst|sie wohnen)"
    r"|haftbefehl gegen (?:sie|dich)"
    r"|(?:sie werden|du wirst) verhaftet"
    # fr
    r"|je vais (?:te|vous) (?:tuer|buter|detruire|faire du mal)"
    r"|(?:tu vas|vous allez) le regretter"
    r"|(?:on sait|je sais|nous savons) ou (?:tu habites|vous habitez)"
    r"|mandat d'arret"
    r"|(?:vous serez|tu seras) arrete"
    # es
    r"|(?:te|le) voy a (?:matar|hacer dano|destruir)"
    r"|(?:te vas|se va) a arrepentir"
    r"|(?:sabemos|se) donde (?:vives|vive)"
    r"|orden de (?:arresto|detencion)"
    r"|(?:sera|seras) (?:arrestado|detenido)"
    # pt
    r"|(?:vou|vamos) (?:te|lhe) (?:matar|machucar|destruir)"
    r"|(?:voce|tu) vai se arrepender"
    r"|(?:sabemos|sei) onde (?:voce mora|tu moras|mora)"
    r"|mandado de prisao"
    r"|(?:voce|tu) (?:sera|vai ser) pres[oa]"
    r")\b"
)
_HARASS = re.compile(
    r"\b(?:"
    # en
    r"kill yourself|kys|go die|you should die|nobody (?:loves|wants) you"
    r"|you(?:'re| are) (?:worthless|a worthless|pathetic|disgusting|a waste of space)"
    r"|fuck (?:you|off)|stupid bitch|dumb bitch|you bitch|you slut|you whore|piece of shit"
    # de
    r"|bring dich um|du bist (?:wertlos|nichts wert|erbarmlich|widerlich)|fick dich"
    r"|hurensohn|du schlampe|du fotze|du hure|verpiss dich"
    # fr
    r"|suicide toi|va mourir|tu ne vaux rien|va te faire (?:foutre|enculer)|connard|connasse"
    r"|sale pute|salope|fils de pute|encule"
    # es
    r"|matate|suicidate|no vales nada|hijo de puta|hija de puta|puta madre|vete a la mierda"
    r"|pendejo|cabron"
    # pt
    r"|se mata|va se matar|voce nao vale nada|filho da puta|filha da puta|vai se foder"
    r"|vagabunda|arrombado|desgracado"
    r")\b"
)
_PAYMENT_SCAM = re.compile(
    r"\b(?:"
    r"(?:pay|buy|purchase|send)(?: \w+){0,3} (?:in |with |using )?(?:gift ?cards?|itunes cards?|google play cards?|steam cards?|amazon cards?)"
    r"|(?:gutscheinkarten?|geschenkkarten?|paysafecards?) (?:kaufen|schicken|senden)"
    r"|(?:cartes? cadeaux?|coupons? (?:pcs|transcash|neosurf)) (?:acheter|envoyer)"
    r"|(?:compr|envi)\w* (?:tarjetas? (?:de )?regalo)"
    r"|(?:compr|envi)\w* (?:cartoes? (?:de )?presente|gift ?cards?)"
    r")\b"
)


def check_text(text: str, sender_name: str | None = None) -> tuple[str, ...]:
    """Labels of what ``text`` (and the sender name shown) is flagged for; () to pass."""
    plain = normalise(text)
    reasons: list[str] = []
    credential = _credential(plain)
    if credential:
        reasons.append("credential:code")
    if _IMPERSONATE.search(plain) or (credential and _INSTITUTION.search(plain)):
        reasons.append("impersonation:authority")
    if sender_name is not None and _AUTHORITY_NAME.search(normalise(sender_name)):
        reasons.append("impersonation:sender-name")
    if _RELATIVE.search(plain):
        reasons.append("impersonation:relative")
    if _THREAT.search(plain):
        reasons.append("threat")
    if _HARASS.search(plain):
        reasons.append("harassment")
    if _PAYMENT_SCAM.search(plain):
        reasons.append("scam:payment")
    return tuple(reasons)
