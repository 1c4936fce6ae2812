"""Capability matching (UCAN-27): abilities, resources, caveats, definitions."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = [
    "CapabilityDef",
    "CaveatCheck",
    "ability_covers",
    "default_caveats",
    "resource_covers",
    "resource_names_did",
]

CaveatCheck = Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]
"""``(claimed, granted) -> None`` when the claim stays within the grant, else the reason."""


def ability_covers(granted: str, claimed: str) -> bool:
    """Whether ``granted`` covers ``claimed``: ``*``, equal, or ``ns/*`` over ``ns/…``.

    A claimed ``*`` is covered only by a granted ``*``.
    """
    if granted in ("*", claimed):
        return True
    return granted.endswith("/*") and claimed != "*" and claimed.startswith(granted[:-1])


def resource_covers(granted: str, claimed: str) -> bool:
    """Whether resource ``granted`` covers ``claimed``: equal, ``ucan:*``, or a ``/*`` or
    ``:*`` wildcard whose prefix ``claimed`` starts with."""
    if granted in (claimed, "ucan:*"):
        return True
    return granted.endswith(("/*", ":*")) and claimed.startswith(granted[:-1])


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def resource_names_did(resource: str, did: str) -> bool:
    """Whether ``did`` is a whole segment of ``resource``: the resource owner's DID.

    The DID must start the resource, follow its scheme (``ixo:did:…``) or follow a ``/``,
    and it must end the resource or be followed by a ``/``. Nothing else delimits it: a
    ``:`` continues a DID (``did:web:victim.co:users:alice`` is another DID), and a DID
    in a query or fragment names nobody's resource. So ``ixo:memory/did:key:z…`` and
    ``ixo:memory/did:key:z…/notes`` name ``did:key:z…``, while ``…z…?owner=1``,
    ``…z…#notes`` and ``ixo:memory/xdid:key:z…`` do not.
    """
    if not did:
        return False
    if resource == did:
        return True
    path_end = len(resource)
    for mark in ("?", "#"):
        found = resource.find(mark)
        if 0 <= found < path_end:
            path_end = found
    scheme = _SCHEME.match(resource)
    scheme_end = scheme.end() if scheme else 0
    start = resource.find(did)
    while start >= 0:
        end = start + len(did)
        if end > path_end:
            return False
        starts_segment = start in (0, scheme_end) or resource[start - 1] == "/"
        if starts_segment and (end == len(resource) or resource[end] == "/"):
            return True
        start = resource.find(did, start + 1)
    return False


def default_caveats(claimed: Mapping[str, Any], granted: Mapping[str, Any]) -> str | None:
    """ucanto's default: every caveat of the grant must be repeated, equal, by the claim."""
    claimed_nb = claimed.get("nb") or {}
    for name, value in (granted.get("nb") or {}).items():
        if claimed_nb.get(name) != value:
            return f"{name}: {claimed_nb.get(name)!r} violates {value!r}"
    return None


@dataclass(frozen=True)
class CapabilityDef:
    """What a service accepts: one ability on resources of one URI scheme.

    Attributes:
        can: The ability, e.g. ``mcp/call``.
        protocol: Scheme prefix every ``with`` must start with (``"urn:"``, ``"did:"``,
            ``"ixo:"``…).
        nb_model: Optional pydantic model the claimed caveats must satisfy.
        derives: Caveat check between a claim and a grant; defaults to ucanto's
            equality rule.
    """

    can: str
    protocol: str = "urn:"
    nb_model: type[BaseModel] | None = None
    derives: CaveatCheck | None = None

    def caveat_violation(
        self, claimed: Mapping[str, Any], granted: Mapping[str, Any]
    ) -> str | None:
        """Why ``claimed`` exceeds ``granted``'s caveats, or ``None``."""
        check = self.derives or default_caveats
        try:
            return check(claimed, granted)
        except Exception as exc:  # a caveat check is caller code; a crash is a refusal
            return f"caveat check failed: {type(exc).__name__}"

    def malformed(self, claimed: Mapping[str, Any]) -> str | None:
        """Why the claimed capability does not fit this definition, or ``None``."""
        if claimed.get("can") != self.can:
            return f"ability {claimed.get('can')!r} is not {self.can!r}"
        if not str(claimed.get("with", "")).startswith(self.protocol):
            return f"resource must be a {self.protocol} URI"
        if self.nb_model is not None:
            try:
                self.nb_model.model_validate(claimed.get("nb") or {})
            except ValidationError as exc:
                return f"invalid caveats: {exc.errors(include_url=False)[0]['msg']}"
        return None
