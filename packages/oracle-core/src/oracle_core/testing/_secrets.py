"""Secrets and user text that must never reach a log, and a check that they did not.

The testing kit marks what it creates or sees as sensitive — the user's messages that a
scripted or double model receives, tokens the kit mints, passwords and mnemonics it
provisions — with :func:`mark_sensitive`; besides, :data:`SECRET_PATTERNS` recognise the
shapes of credentials whoever made them (a bearer header, a UCAN or ucanto private key,
an API key, a Matrix access token, a PEM key). :class:`LogScan` collects log records and
:func:`leaks_in` names what of that they contain; the pytest plugin
``oracle_core.testing.pytest_plugin`` runs the check after every test.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "MIN_SENSITIVE_LENGTH",
    "SECRET_PATTERNS",
    "LogLeak",
    "LogScan",
    "leaks_in",
    "mark_sensitive",
    "sensitive_values",
]

MIN_SENSITIVE_LENGTH = 12
"""Shorter values are not kept: "ok" or "hello" would be found in any log by chance."""

SECRET_PATTERNS: dict[str, re.Pattern[str]] = {
    "bearer credential": re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]{20,}"),
    # A CARv1 header {"roots": [...]}, base64: how UCAN delegations and invocations travel.
    "UCAN token": re.compile(r"OqJlcm9vdH[A-Za-z0-9+/=_-]{40,}"),
    # ucanto's Ed25519 private-key text: "M" + base64 of 0x80 0x26 + key + public key.
    "ucanto private key": re.compile(r"\bMgC[A-Za-z0-9+/]{80,}"),
    "API key": re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
    "Matrix access token": re.compile(r"\bsyt_[A-Za-z0-9_]{16,}"),
    "PEM private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
}
"""Shapes of credentials, by kind."""

_lock = threading.Lock()
_sensitive: set[str] = set()
# The marked values by their first MIN_SENSITIVE_LENGTH characters: a text is searched in
# one pass over its positions, whatever the number of values marked (a whole test run
# marks thousands of tokens and messages, and every test's logs are searched for all).
_by_prefix: dict[str, set[str]] = {}


def mark_sensitive(*values: object) -> None:
    """Remember ``values`` as text no log may contain (for the rest of the process).

    Non-strings and values shorter than ``MIN_SENSITIVE_LENGTH`` characters are ignored;
    surrounding whitespace is dropped.
    """
    with _lock:
        for value in values:
            if isinstance(value, str) and len(value.strip()) >= MIN_SENSITIVE_LENGTH:
                text = value.strip()
                _sensitive.add(text)
                _by_prefix.setdefault(text[:MIN_SENSITIVE_LENGTH], set()).add(text)


def sensitive_values() -> frozenset[str]:
    """Everything marked so far."""
    with _lock:
        return frozenset(_sensitive)


@dataclass(frozen=True)
class LogLeak:
    """Something a log record should not have held.

    Attributes:
        logger: The logger that emitted the record.
        kind: ``marked value``, or the kind of a matching ``SECRET_PATTERNS`` entry.
        hint: The leaked text shortened to its first characters and its length, so that
            a report does not repeat the secret.
    """

    logger: str
    kind: str
    hint: str

    def __str__(self) -> str:
        return f"{self.kind} in a record of logger '{self.logger}': {self.hint}"


def _hint(text: str) -> str:
    return f"{text[:6]}… ({len(text)} characters)"


def leaks_in(records: Iterable[logging.LogRecord]) -> list[LogLeak]:
    """What of the marked values and the credential shapes ``records`` contain.

    A record is read as a handler would write it: its message with arguments, and the
    traceback text of an exception it carries.
    """
    leaks: list[LogLeak] = []
    for record in records:
        text = _record_text(record)
        for value in sorted(_marked_in(text)):
            leaks.append(LogLeak(record.name, "marked value", _hint(value)))
        for kind, pattern in SECRET_PATTERNS.items():
            match = pattern.search(text)
            if match is not None:
                leaks.append(LogLeak(record.name, kind, _hint(match.group(0))))
    return leaks


def _marked_in(text: str) -> set[str]:
    """The marked values ``text`` contains."""
    width = MIN_SENSITIVE_LENGTH
    found: set[str] = set()
    with _lock:
        if not _by_prefix:
            return found
        for start in range(len(text) - width + 1):
            candidates = _by_prefix.get(text[start : start + width])
            if candidates:
                found.update(v for v in candidates if text.startswith(v, start))
    return found


def _record_text(record: logging.LogRecord) -> str:
    try:
        text = record.getMessage()
    except Exception:  # a record whose arguments do not format: read its parts
        text = f"{record.msg} {record.args}"
    if record.exc_info:
        text += "\n" + logging.Formatter().formatException(record.exc_info)
    if record.stack_info:
        text += "\n" + record.stack_info
    return text


class LogScan(logging.Handler):
    """A handler that keeps every record it receives until :meth:`clear`."""

    def __init__(self) -> None:
        super().__init__(level=logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep ``record``."""
        self.records.append(record)

    def clear(self) -> None:
        """Forget the records kept so far."""
        self.records = []

    def leaks(self) -> list[LogLeak]:
        """What the kept records should not have held."""
        return leaks_in(self.records)
