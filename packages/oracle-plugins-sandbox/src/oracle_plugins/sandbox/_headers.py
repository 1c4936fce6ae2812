"""What each sandbox request carries: who the caller is, and, for runs, the secrets.

Remote (a hosted sandbox): ``Authorization: Bearer <invocation>`` minted per call from the
user's delegation (``ixo:sandbox``, ``sandbox/*``, audience the sandbox's ``did:web``)
with ``X-Auth-Type: ucan``. A mint that fails leaves the header out — there is no other
way in — and the sandbox's 401 comes back to the model as the tool's error.

Embedded: the token the oracle gave its sandbox at start and ``X-Sandbox-User`` naming
the user (the oracle authenticated the user; the sandbox trusts only the oracle).

Both: ``X-Skills-Invocation`` (``ixo:skills``, ``skills/*``, for the capsule registry)
when the oracle knows a registry, so the sandbox fetches the user's private skills too.
``sandbox_run`` also carries ``x-os-<name>`` per oracle secret and ``x-us-<name>`` per
user secret (names lower-cased). Those are read on the first run of a request and kept
for its other runs (MCP headers are fixed per connection: the first run opens the
secret-bearing connection), and never sent with the other tools.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oracle_core import RuntimeContext
from oracle_mcp import AuthFailure, UcanInvocationAuth

__all__ = [
    "SANDBOX_ABILITY",
    "SANDBOX_CAPABILITY",
    "SKILLS_ABILITY",
    "SKILLS_CAPABILITY",
    "RequestHeaders",
    "SandboxAuth",
]

SANDBOX_CAPABILITY = "ixo:sandbox"
SANDBOX_ABILITY = "sandbox/*"
SKILLS_CAPABILITY = "ixo:skills"
SKILLS_ABILITY = "skills/*"
USER_HEADER = "X-Sandbox-User"
# A header value is one line of visible ASCII: a secret that is not is left out.
_HEADER_VALUE = re.compile(r"^[\x20-\x7e]{1,8192}$")
_HEADER_NAME = re.compile(r"^[a-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class SandboxAuth:
    """How requests to this oracle's sandbox are authorised.

    Attributes:
        sandbox_url: The sandbox's MCP URL (its ``did:web`` host, when remote).
        embedded_token: The embedded sandbox's token; ``None`` for a hosted sandbox.
        skills_url: The capsule registry, when the oracle has one.
    """

    sandbox_url: str
    embedded_token: str | None = None
    skills_url: str | None = None

    async def base(self, rt_ctx: RuntimeContext[Any]) -> dict[str, str]:
        """The headers of every request for this user (never the secrets)."""
        headers: dict[str, str] = {}
        if self.embedded_token is not None:
            headers["Authorization"] = f"Bearer {self.embedded_token}"
            headers[USER_HEADER] = rt_ctx.user.did
        else:
            minted = await UcanInvocationAuth(
                self.sandbox_url, SANDBOX_CAPABILITY, SANDBOX_ABILITY
            )(rt_ctx)
            if isinstance(minted, AuthFailure):
                rt_ctx.logger.warning("sandbox: no invocation for this call: %s", minted.reason)
            else:
                headers.update(minted)
        if self.skills_url:
            skills = await UcanInvocationAuth(self.skills_url, SKILLS_CAPABILITY, SKILLS_ABILITY)(
                rt_ctx
            )
            if isinstance(skills, AuthFailure):
                rt_ctx.logger.info("sandbox: no skills invocation: %s", skills.reason)
            else:
                headers["X-Skills-Invocation"] = skills["Authorization"].removeprefix("Bearer ")
        return headers


def secret_headers(
    oracle: Mapping[str, str], user: Mapping[str, str], rt_ctx: RuntimeContext[Any]
) -> dict[str, str]:
    """``x-os-<name>`` / ``x-us-<name>`` for the secrets that fit in a header."""
    headers: dict[str, str] = {}
    for prefix, secrets in (("x-os-", oracle), ("x-us-", user)):
        for name, value in secrets.items():
            key = name.lower()
            if not _HEADER_NAME.match(key) or not _HEADER_VALUE.match(value):
                # The name only: values are never logged.
                rt_ctx.logger.warning(
                    "sandbox: secret %s cannot travel in a header; left out", name
                )
                continue
            headers[prefix + key] = value
    return headers


@dataclass
class RequestHeaders:
    """The headers of one request's sandbox calls (one per agent build).

    Args:
        auth: How calls are authorised.
        oracle_secrets: ``ORACLE_SECRETS``, parsed.
    """

    auth: SandboxAuth
    oracle_secrets: Mapping[str, str]
    _secrets: dict[str, str] | None = field(default=None, init=False)

    async def for_tools(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, str]:
        """Headers of listing and of every call but ``sandbox_run``."""
        return await self.auth.base(rt_ctx)

    async def for_runs(self, rt_ctx: RuntimeContext[Any]) -> Mapping[str, str]:
        """Headers of ``sandbox_run``: the base ones and the secrets, read once."""
        if self._secrets is None:
            self._secrets = secret_headers(self.oracle_secrets, await _user_secrets(rt_ctx), rt_ctx)
        return {**await self.auth.base(rt_ctx), **self._secrets}


async def _user_secrets(rt_ctx: RuntimeContext[Any]) -> dict[str, str]:
    accessor = rt_ctx.secrets
    if accessor is None:
        return {}
    try:
        names = [entry.name for entry in await accessor.get_index()]
        return dict(await accessor.get_values(names)) if names else {}
    except Exception as exc:  # secrets are optional for a run: it goes ahead without them
        rt_ctx.logger.warning("sandbox: the user's secrets were not read (%s)", type(exc).__name__)
        return {}
