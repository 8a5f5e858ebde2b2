"""The wire of notification services: one HTTP request, one email over SMTP. What is sent is shaped by
`tidecd.notify.services`; this module only sends it and says what went wrong in words that carry no URL path,
query, token or body (a Slack or Teams webhook URL is itself a credential): only the service, the host and
the status code or the error's type.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from urllib.parse import urlsplit

from tidecd.base.errors import TemporaryError

TIMEOUT = 5.0
ANSWER_LIMIT = 64 * 1024


class SendFailed(TemporaryError):
    """A notification was not delivered; the message names the service and host, never a credential."""


@dataclass(frozen=True)
class Answer:
    status: int
    text: str  # the body, at most ANSWER_LIMIT bytes (may be echoed by the service; never put in an error)


def host_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}{f':{parts.port}' if parts.port else ''}"


def request(service: str, method: str, url: str, body: bytes | None, headers: Mapping[str, str], *,
            auth: tuple[str, str] | None = None, verify: bool = True, timeout: float = TIMEOUT) -> Answer:
    """Send one request; raises SendFailed when the service cannot be reached (the answer, whatever its
    status, is returned)."""
    # lazy: cold start (requests only when a notification is delivered)
    import requests

    if urlsplit(url).scheme not in ("http", "https"):
        raise SendFailed(f"{service}: the URL is not http(s)")
    try:
        with requests.request(method, url, data=body, headers=dict(headers), auth=auth, verify=verify,
                              timeout=timeout, stream=True, allow_redirects=False) as answer:
            text = answer.raw.read(ANSWER_LIMIT, decode_content=True).decode("utf-8", errors="replace")
            return Answer(answer.status_code, text)
    except requests.RequestException as exc:
        raise SendFailed(f"{service}: {host_of(url)} unreachable: {type(exc).__name__}") from None


def send_mail(*, host: str, port: int, sender: str, to: Sequence[str], subject: str, body: str, html: bool,
              username: str = "", password: str = "", insecure_skip_verify: bool = False,
              timeout: float = TIMEOUT) -> None:
    """One email, as Argo CD's email service sends it (gomail): implicit TLS on port 465, else STARTTLS when
    the server offers it; a login when a username is set."""
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = sender, ", ".join(to), subject
    message.set_content(body, subtype="html" if html else "plain")
    context = ssl.create_default_context()
    if insecure_skip_verify:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        client = smtplib.SMTP_SSL(host, port, timeout=timeout, context=context) if port == 465 else \
            smtplib.SMTP(host, port, timeout=timeout)
        with client:
            client.ehlo()
            if port != 465 and client.has_extn("starttls"):
                client.starttls(context=context)
                client.ehlo()
            if username:
                client.login(username, password)
            client.send_message(message, from_addr=sender, to_addrs=list(to))
    except smtplib.SMTPResponseException as exc:
        raise SendFailed(f"email: {host}:{port} answered {exc.smtp_code}") from None
    except (smtplib.SMTPException, OSError) as exc:
        raise SendFailed(f"email: {host}:{port}: {type(exc).__name__}") from None
