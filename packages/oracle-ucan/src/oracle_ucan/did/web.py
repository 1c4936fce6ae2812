"""``did:web`` resolution (UCAN-21) and the bounded JSON fetch every network resolver uses.

Network bounds, for every resolver of this package:

- one overall deadline per request (the resolver's ``timeout``, connect to last body byte), on
  top of httpx's per-operation timeouts, so a server that trickles bytes cannot hold a
  validation open;
- response bodies are limited to :data:`MAX_DOCUMENT_BYTES` (1 MiB, after content
  decoding): a DID document is a few KiB and anything larger is refused, not buffered;
- redirects, where followed, are followed at most :data:`MAX_REDIRECTS` times, never from
  https to http and to plain http only on the same host (:func:`redirect_allowed`): a
  document fetched in clear text after a downgrade could be anyone's;
- every failure (connection, TLS, timeout, status, size, JSON) is a
  :class:`~oracle_ucan.errors.DidResolutionError`, never another exception type.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Literal
from urllib.parse import quote, unquote

import httpx

from oracle_ucan.did.key import did_key_from_multibase
from oracle_ucan.errors import DidResolutionError, NotHandled

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_REDIRECTS",
    "WebResolver",
    "did_web_document_url",
    "fetch_json",
    "redirect_allowed",
]

MAX_DOCUMENT_BYTES = 1 << 20
"""Largest response body a resolver reads (1 MiB)."""
MAX_REDIRECTS = 5
"""Most redirects followed by one fetch."""
_PLAIN_HTTP_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})

# ASCII host names and IPv4 (LDH labels), or a bracketed IPv6 literal; optional port.
# Anything else (userinfo, slashes, query, spaces) would let a DID steer the request
# somewhere its text does not say.
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$"
)
_FORBIDDEN_IN_SEGMENT = frozenset("/\\?#")


async def fetch_json(
    method: Literal["GET", "POST"],
    url: str,
    *,
    client: httpx.AsyncClient | None,
    deadline: float,
    what: str,
    body: object = None,
    follow_redirects: bool = False,
) -> object:
    """Send one request and return its decoded JSON body.

    Args:
        method: ``GET`` or ``POST``.
        url: Absolute http(s) URL.
        client: Client to send with; ``None`` opens (and closes) one for this request.
        deadline: Overall limit in seconds; also each httpx operation's timeout.
        what: Short name of the remote for error messages, e.g. ``"Blocksync"``.
        body: JSON body of a ``POST``.
        follow_redirects: Whether to follow redirects (GETs of public documents do), within
            :func:`redirect_allowed`.

    Returns:
        The parsed JSON value.

    Raises:
        DidResolutionError: on any network, status, size or decoding failure.
    """
    if client is None:
        async with httpx.AsyncClient(timeout=deadline) as owned:
            return await _fetch_json(owned, method, url, deadline, what, body, follow_redirects)
    return await _fetch_json(client, method, url, deadline, what, body, follow_redirects)


async def _fetch_json(
    client: httpx.AsyncClient,
    method: Literal["GET", "POST"],
    url: str,
    deadline: float,
    what: str,
    body: object,
    follow_redirects: bool,
) -> object:
    # Identity encoding keeps the size limit about bytes on the wire, not a decompression ratio.
    headers = {"accept": "application/json", "accept-encoding": "identity"}
    try:
        async with asyncio.timeout(deadline):
            content = await _read_following(
                client, method, url, deadline, what, body, follow_redirects, headers
            )
    except (TimeoutError, httpx.TimeoutException) as exc:
        raise DidResolutionError(f"{what} did not answer within {deadline:g} s") from exc
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, OSError) as exc:
        raise DidResolutionError(f"{what} request failed ({type(exc).__name__})") from exc
    try:
        return json.loads(bytes(content))
    # RecursionError: 1 MiB of "[" is valid-looking input that overflows the parser's stack.
    except (ValueError, RecursionError) as exc:
        raise DidResolutionError(f"{what} answered invalid JSON") from exc


def redirect_allowed(source: httpx.URL, target: httpx.URL) -> bool:
    """Whether a fetch of ``source`` may follow a redirect to ``target``.

    To https always; to http only from http on the same host. A redirect from https down
    to http would carry the document in clear text, where whoever is on the path could
    answer with keys of their own; and a plain-http fetch (a loopback did:web, or a
    service URL the operator wrote with http) must not be sent in clear text elsewhere.
    """
    if target.scheme == "https":
        return True
    return target.scheme == "http" and source.scheme == "http" and target.host == source.host


async def _read_following(
    client: httpx.AsyncClient,
    method: Literal["GET", "POST"],
    url: str,
    deadline: float,
    what: str,
    body: object,
    follow_redirects: bool,
    headers: dict[str, str],
) -> bytearray:
    """The body of ``url``, redirects followed here (not by httpx) to apply the policy."""
    current = httpx.URL(url)
    for _ in range(MAX_REDIRECTS + 1):
        async with client.stream(
            method,
            current,
            json=body if method == "POST" else None,
            headers=headers,
            timeout=deadline,
            follow_redirects=False,
        ) as response:
            if follow_redirects and response.is_redirect:
                target = current.join(response.headers["location"])
                if not redirect_allowed(current, target):
                    raise DidResolutionError(
                        f"{what} redirected from {current.scheme} to {target.scheme}; refused"
                    )
                current = target
                continue
            return await _read_body(response, what)
    raise DidResolutionError(f"{what} redirected more than {MAX_REDIRECTS} times")


async def _read_body(response: httpx.Response, what: str) -> bytearray:
    if not response.is_success:
        raise DidResolutionError(f"{what} answered HTTP {response.status_code}")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_DOCUMENT_BYTES:
        raise DidResolutionError(f"{what} response exceeds {MAX_DOCUMENT_BYTES} bytes")
    content = bytearray()
    async for chunk in response.aiter_bytes():
        content += chunk
        if len(content) > MAX_DOCUMENT_BYTES:
            raise DidResolutionError(f"{what} response exceeds {MAX_DOCUMENT_BYTES} bytes")
    return content


def did_web_document_url(did: str, *, scheme: str | None = None) -> str:
    """The URL of a ``did:web`` document.

    ``did:web:example.com`` → ``https://example.com/.well-known/did.json``;
    ``did:web:example.com%3A8443:users:alice`` → ``https://example.com:8443/users/alice/did.json``.
    Only ``localhost``, ``127.0.0.1`` and ``[::1]`` use http: a ``*.localhost`` name may be
    resolved through DNS like any other.

    Args:
        did: The ``did:web`` DID.
        scheme: Force ``http`` or ``https`` instead of choosing by host.

    Raises:
        NotHandled: not a ``did:web``.
        DidResolutionError: a malformed ``did:web`` (bad host or path segment).
    """
    if not did.startswith("did:web:"):
        raise NotHandled("not a did:web")
    host_part, *segment_parts = did[len("did:web:") :].split(":")
    host = unquote(host_part)
    if not _HOST.fullmatch(host):
        raise DidResolutionError("invalid did:web: the host is not a domain name or IP address")
    segments = [unquote(part) for part in segment_parts]
    for segment in segments:
        if segment in {"", ".", ".."} or _FORBIDDEN_IN_SEGMENT.intersection(segment):
            raise DidResolutionError("invalid did:web: bad path segment")
    if scheme is None:
        scheme = "http" if _is_loopback(host) else "https"
    if not segments:
        return f"{scheme}://{host}/.well-known/did.json"
    path = "/".join(quote(segment, safe="") for segment in segments)
    return f"{scheme}://{host}/{path}/did.json"


def _is_loopback(host: str) -> bool:
    # Only names that cannot leave the machine go over plain http. A "localhost" prefix
    # (localhost.example.com) is a public name, and so, to many resolvers, is a
    # "*.localhost" one: both keep https.
    name = host.rsplit(":", 1)[0] if not host.endswith("]") and ":" in host else host
    return name.lower() in _PLAIN_HTTP_HOSTS


class WebResolver:
    """Resolves ``did:web`` DIDs to the Ed25519 keys of their documents (UCAN-21).

    Args:
        client: Client to send with; ``None`` opens one per resolution.
        timeout: Overall deadline of one fetch, in seconds.
        fallback_to_http: Retry over http when the https fetch fails (network error,
            non-2xx, oversize or invalid JSON). Off by default: a document fetched in
            clear text can be swapped by anyone on the path.
    """

    def __init__(
        self,
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = 10.0,
        fallback_to_http: bool = False,
    ) -> None:
        self._client = client
        self._timeout = timeout
        self._fallback_to_http = fallback_to_http

    async def resolve(self, did: str) -> list[str]:
        """The ``did:key``s of the document's Ed25519 verification methods, in order.

        Raises:
            NotHandled: not a ``did:web``.
            DidResolutionError: malformed DID, fetch failure, a document whose ``id`` is
                not ``did``, or no Ed25519 ``publicKeyMultibase`` key.
        """
        url = did_web_document_url(did)
        try:
            document = await self._fetch(url)
        except DidResolutionError:
            if not (self._fallback_to_http and url.startswith("https://")):
                raise
            document = await self._fetch(did_web_document_url(did, scheme="http"))
        return _document_keys(did, document)

    async def _fetch(self, url: str) -> object:
        return await fetch_json(
            "GET",
            url,
            client=self._client,
            deadline=self._timeout,
            what="did:web host",
            follow_redirects=True,
        )


def _document_keys(did: str, document: object) -> list[str]:
    if not isinstance(document, dict):
        raise DidResolutionError("did:web document is not a JSON object")
    # Without this check any host could serve another DID's document under its own name.
    if document.get("id") != did:
        raise DidResolutionError("did:web document id does not match the DID")
    methods = document.get("verificationMethod")
    if not isinstance(methods, list):
        raise DidResolutionError("did:web document has no verificationMethod list")
    keys: list[str] = []
    for method in methods:
        if not isinstance(method, dict):
            continue
        kind = method.get("type")
        value = method.get("publicKeyMultibase")
        if not (isinstance(kind, str) and "Ed25519" in kind and isinstance(value, str)):
            continue
        did_key = did_key_from_multibase(value)
        if did_key is not None and did_key not in keys:
            keys.append(did_key)
    if not keys:
        raise DidResolutionError("did:web document lists no Ed25519 key")
    return keys
