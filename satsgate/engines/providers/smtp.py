"""Provider kind ``smtp``: e-mail through the operator's own SMTP server (aiosmtplib).

::

    [providers.mail]
    kind = "smtp"
    host = "smtp.example.com"
    port = 587                      # default 587; 465 means implicit TLS
    from_address = "node@example.com"
    from_name = "My node"           # optional: the display name when the caller sends none
    starttls = true                 # optional: true requires STARTTLS, false never uses it;
                                    # unset: STARTTLS when the server offers it
    tls = false                     # optional: implicit TLS (default: port == 465)
    username = "node@example.com"   # optional: log in (with password or password_env)
    password_env = "SMTP_PASSWORD"  # or password = "..."; never logged, never shown
    ca_file = "/etc/ssl/relay.pem"  # optional: trust this CA (a relay's own certificate)
    validate_certs = true           # optional
    timeout_s = 30                  # optional: per SMTP command

    [engines]
    email = "mail"

It serves the engine ``email`` (satsgate.engines.mail.EmailEngine). Each send opens one
connection (a node sends few e-mails; no pool to keep alive). A failure before the
server could have taken the message (connect, TLS, login, sender or every recipient
refused) may fall back to the next provider; from the data transfer on, it never does.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Mapping
from email.message import EmailMessage
from email.policy import SMTP, SMTPUTF8
from email.utils import formataddr, formatdate, make_msgid
from typing import Any

import aiosmtplib

from satsgate.engines.config import EngineConfigError, ProviderConfig
from satsgate.engines.errors import EngineError
from satsgate.engines.mail import OutgoingEmail, SentEmail
from satsgate.engines.providers.upstream import cause_of, check_options
from satsgate.engines.registry import EngineDeps
from satsgate.errors import ErrorCode

log = logging.getLogger(__name__)

KIND = "smtp"
_KNOWN_OPTIONS = frozenset(
    {
        "host",
        "port",
        "from_address",
        "from_name",
        "starttls",
        "tls",
        "username",
        "password",
        "password_env",
        "ca_file",
        "validate_certs",
    }
)


def _option(options: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = options.get(key)
    if value is not None and (
        not isinstance(value, kind) or isinstance(value, bool) != (kind is bool)
    ):
        raise EngineConfigError(f"{where}: {key} must be a {kind.__name__}")
    return value


class SmtpEmail:
    """The ``email`` engine of one ``[providers.NAME] kind = "smtp"`` table."""

    def __init__(self, config: ProviderConfig, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        where = f"[providers.{config.name}]"
        opts = config.options
        check_options(config, _KNOWN_OPTIONS)
        host = _option(opts, "host", str, where)
        if not host:
            raise EngineConfigError(f'{where} needs host = "..."')
        port = _option(opts, "port", int, where)
        port = 587 if port is None else port
        if not 0 < port < 65536:
            raise EngineConfigError(f"{where}: port must be 1 to 65535")
        from_address = _option(opts, "from_address", str, where)
        if not from_address or "@" not in from_address or any(c in from_address for c in "\r\n"):
            raise EngineConfigError(f'{where} needs from_address = "name@domain"')
        tls = _option(opts, "tls", bool, where)
        starttls = _option(opts, "starttls", bool, where)
        self.use_tls = (port == 465) if tls is None else tls
        if self.use_tls and starttls:
            raise EngineConfigError(f"{where}: tls (implicit TLS) and starttls exclude each other")
        # aiosmtplib: True requires STARTTLS, False never, None upgrades when offered.
        self.start_tls: bool | None = False if self.use_tls else starttls
        username = _option(opts, "username", str, where)
        password = _option(opts, "password", str, where)
        password_env = _option(opts, "password_env", str, where)
        if password is not None and password_env is not None:
            raise EngineConfigError(f"{where}: give password or password_env, not both")
        if password_env is not None:
            if password_env not in env:
                raise EngineConfigError(
                    f"{where}: password_env names {password_env!r}, which is not set"
                )
            password = env[password_env]
        if (username is None) != (password is None):
            raise EngineConfigError(f"{where}: username and a password go together")
        self.username = username
        self._password = password
        validate = _option(opts, "validate_certs", bool, where)
        ca_file = _option(opts, "ca_file", str, where)
        self.tls_context: ssl.SSLContext | None = None
        if ca_file is not None or validate is False:
            try:
                context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise EngineConfigError(f"{where}: ca_file cannot be read: {exc}") from None
            if validate is False:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self.tls_context = context
        self.name = config.name
        self.host = host
        self.port = port
        self.from_address = from_address
        self.from_name = _option(opts, "from_name", str, where)
        self.timeout_s = config.timeout_s

    def _client(self) -> aiosmtplib.SMTP:
        return aiosmtplib.SMTP(
            hostname=self.host,
            port=self.port,
            use_tls=self.use_tls,
            start_tls=self.start_tls,
            tls_context=self.tls_context,
            timeout=self.timeout_s,
        )

    def compose(self, message: OutgoingEmail) -> EmailMessage:
        utf8 = not all(addr.isascii() for addr in message.to)
        msg = EmailMessage(policy=SMTPUTF8 if utf8 else SMTP)
        name = message.from_name or self.from_name
        msg["From"] = formataddr((name, self.from_address)) if name else self.from_address
        msg["To"] = ", ".join(message.to)
        msg["Subject"] = message.subject
        msg["Date"] = formatdate(localtime=False, usegmt=True)
        msg["Message-ID"] = make_msgid(domain=self.from_address.rsplit("@", 1)[1])
        if message.reply_to:
            msg["Reply-To"] = message.reply_to
        if message.text is not None:
            msg.set_content(message.text)
            if message.html is not None:
                msg.add_alternative(message.html, subtype="html")
        else:
            assert message.html is not None
            msg.set_content(message.html, subtype="html")
        for attachment in message.attachments:
            maintype, _, subtype = attachment.content_type.partition("/")
            msg.add_attachment(
                attachment.data,
                maintype=maintype,
                subtype=subtype or "octet-stream",
                filename=attachment.filename,
            )
        return msg

    async def send(self, message: OutgoingEmail) -> SentEmail:
        msg = self.compose(message)
        smtp = self._client()
        sent_data = False
        try:
            await smtp.connect()
            if self.username is not None and self._password is not None:
                await smtp.login(self.username, self._password)
            utf8 = msg.policy is SMTPUTF8
            if utf8 and not smtp.supports_extension("smtputf8"):
                raise EngineError(
                    ErrorCode.INVALID_INPUT,
                    "The mail server cannot deliver to internationalized addresses.",
                    may_fall_back=True,
                )
            options = ["SMTPUTF8"] if utf8 else []
            if smtp.supports_extension("8bitmime"):
                options.append("BODY=8BITMIME")
            await smtp.mail(self.from_address, options=options, encoding="utf-8")
            accepted: list[str] = []
            refused: dict[str, int] = {}
            for rcpt in message.to:
                try:
                    await smtp.rcpt(rcpt, encoding="utf-8")
                    accepted.append(rcpt)
                except aiosmtplib.SMTPRecipientRefused as exc:
                    # The reply code only: the server's text may name the server.
                    refused[rcpt] = exc.code
            if not accepted:
                permanent = all(code >= 500 for code in refused.values())
                raise EngineError(
                    ErrorCode.INVALID_INPUT if permanent else ErrorCode.SERVICE_ERROR,
                    "The mail server refused every recipient; nothing was sent.",
                    may_fall_back=not permanent,
                    extra={"refused": sorted(refused)},
                )
            sent_data = True
            await smtp.data(msg.as_bytes())
        except EngineError:
            raise
        except aiosmtplib.SMTPDataError as exc:
            # The server answered the data transfer with a refusal: nothing was sent.
            raise EngineError(
                ErrorCode.SERVICE_ERROR if exc.code < 500 else ErrorCode.INVALID_INPUT,
                f"The mail server refused the message ({exc.code}); nothing was sent.",
                may_fall_back=False,
            ) from None
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            log.warning("smtp %s: sending failed (%s)", self.name, cause_of(exc))
            if sent_data:
                raise EngineError(
                    ErrorCode.SERVICE_ERROR,
                    "The mail server stopped answering during delivery; the message may "
                    "or may not have been sent.",
                    may_fall_back=False,
                ) from None
            raise EngineError(
                ErrorCode.SERVICE_ERROR,
                "The mail server could not be reached or refused the connection; nothing was sent.",
            ) from None
        finally:
            if smtp.is_connected:
                try:
                    await smtp.quit()
                except (aiosmtplib.SMTPException, OSError, TimeoutError):
                    smtp.close()
        return SentEmail(
            str(msg["Message-ID"]),
            tuple(accepted),
            {rcpt: str(code) for rcpt, code in refused.items()},  # the reply codes as text
        )


class SmtpProvider:
    def __init__(self, config: ProviderConfig, deps: EngineDeps) -> None:
        self.email = SmtpEmail(config)

    def engine(self, name: str) -> object | None:
        return self.email if name == "email" else None

    async def aclose(self) -> None:
        return None
