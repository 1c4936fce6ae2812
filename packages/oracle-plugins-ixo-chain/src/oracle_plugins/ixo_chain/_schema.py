"""Input models of the two tools: strict, so a wrong key or kind rejects the whole call.

Ids are plain strings here on purpose: a malformed id answers ``invalid_input`` for its
own request (checked in ``_ids``) while the other requests of the call still run.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ChainLookupArgs",
    "ClaimCollectionRequest",
    "ClaimCollectionsRequest",
    "ClaimRequest",
    "ClaimsRequest",
    "DidDocumentRequest",
    "EntitiesRequest",
    "EntityRequest",
    "GetAccountBalancesArgs",
    "LookupRequest",
    "ReceivedTransactionsRequest",
    "SentTransactionsRequest",
    "TokenBalancesRequest",
    "TransactionRequest",
]

MAX_REQUESTS = 8
MAX_FIRST = 20
DEFAULT_FIRST = 10

ClaimStatus = Literal["pending", "approved", "rejected", "disputed", "invalidated", "flagged"]

_ACCOUNT = "ixo1… or did:ixo:ixo1…; default: the user"
_FIRST = f"1-{MAX_FIRST}, default {DEFAULT_FIRST}"
_AFTER = "endCursor of the previous page"


def _compact(schema: dict[str, Any], *_: Any) -> None:
    """Drop what costs the model tokens and tells it nothing: titles, ``anyOf`` with
    null for optional strings, ``default: null``."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        options = prop.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
            del prop["anyOf"]
            prop.update(next(o for o in options if o != {"type": "null"}))
        if "default" in prop and prop["default"] is None:
            del prop["default"]


_STRICT = ConfigDict(extra="forbid", json_schema_extra=_compact)


class _Request(BaseModel):
    model_config = _STRICT


class ClaimsRequest(_Request):
    """Claims submitted by an agent, newest first."""

    kind: Literal["claims"]
    agent: str | None = Field(None, description=_ACCOUNT)
    collection: str | None = Field(None, description="Claim collection id, e.g. 8250")
    status: ClaimStatus | None = None
    first: int = Field(DEFAULT_FIRST, ge=1, le=MAX_FIRST, description=_FIRST)
    after: str | None = Field(None, description=_AFTER)


class ClaimRequest(_Request):
    """One claim and its evaluation."""

    kind: Literal["claim"]
    id: str = Field(description="Claim id")


class ClaimCollectionsRequest(_Request):
    """Claim collections of an entity, or administered by an account (default the user)."""

    kind: Literal["claim_collections"]
    entity: str | None = Field(None, description="did:ixo:entity:…")
    admin: str | None = Field(None, description=_ACCOUNT)


class ClaimCollectionRequest(_Request):
    """One claim collection: state, counts, payments."""

    kind: Literal["claim_collection"]
    id: str = Field(description="Collection id, e.g. 8250")


class EntityRequest(_Request):
    """One entity."""

    kind: Literal["entity"]
    id: str = Field(description="did:ixo:entity:…")


class EntitiesRequest(_Request):
    """Entities owned by an account."""

    kind: Literal["entities"]
    owner: str | None = Field(None, description=_ACCOUNT)
    first: int = Field(DEFAULT_FIRST, ge=1, le=MAX_FIRST, description=_FIRST)
    after: str | None = Field(None, description=_AFTER)


class DidDocumentRequest(_Request):
    """The DID document of a did:ixo:… identifier."""

    kind: Literal["did_document"]
    did: str = Field(description="did:ixo:…")


class TransactionRequest(_Request):
    """One transaction by hash."""

    kind: Literal["transaction"]
    hash: str = Field(description="64 hex characters")


class SentTransactionsRequest(_Request):
    """Transactions an account signed, newest first."""

    kind: Literal["sent_transactions"]
    account: str | None = Field(None, description=_ACCOUNT)
    first: int = Field(DEFAULT_FIRST, ge=1, le=MAX_FIRST, description=_FIRST)
    after: str | None = Field(None, description=_AFTER)


class ReceivedTransactionsRequest(_Request):
    """Transactions with a message to an account, newest first."""

    kind: Literal["received_transactions"]
    account: str | None = Field(None, description=_ACCOUNT)
    first: int = Field(DEFAULT_FIRST, ge=1, le=MAX_FIRST, description=_FIRST)
    after: str | None = Field(None, description=_AFTER)


class TokenBalancesRequest(_Request):
    """IXO 1155 token (carbon credits, impact tokens) holdings of an account."""

    kind: Literal["token_balances"]
    account: str | None = Field(None, description=_ACCOUNT)


LookupRequest = Annotated[
    ClaimsRequest
    | ClaimRequest
    | ClaimCollectionsRequest
    | ClaimCollectionRequest
    | EntityRequest
    | EntitiesRequest
    | DidDocumentRequest
    | TransactionRequest
    | SentTransactionsRequest
    | ReceivedTransactionsRequest
    | TokenBalancesRequest,
    Field(discriminator="kind"),
]


class ChainLookupArgs(BaseModel):
    """Arguments of ``chain_lookup``."""

    model_config = _STRICT

    requests: list[LookupRequest] = Field(
        min_length=1,
        max_length=MAX_REQUESTS,
        description=f"1-{MAX_REQUESTS} requests, each with a kind; sent together",
    )


class GetAccountBalancesArgs(BaseModel):
    """Arguments of ``get_account_balances``."""

    model_config = _STRICT

    address: str | None = Field(None, description=_ACCOUNT)
