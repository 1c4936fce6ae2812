"""The Blocksync GraphQL document: one aliased root field per request.

Values enter the document only through ``string`` (a ``CheckedId``, i.e. a value that
matched its kind's pattern) and ``integer`` (a validated ``int``); everything else is
text of this module. Field names follow the Blocksync schema (PostGraphile with the
simplify inflector and connection filters).
"""

from __future__ import annotations

import json

from oracle_plugins.ixo_chain._ids import CheckedId

__all__ = [
    "CLAIM_FIELDS",
    "COLLECTION_FIELDS",
    "ENTITY_FIELDS",
    "IID_FIELDS",
    "TOKEN_BALANCE_FIELDS",
    "TX_FIELDS",
    "connection",
    "document",
    "equal_to",
    "integer",
    "string",
]

MAX_TX_MESSAGES = 10

CLAIM_FIELDS = (
    "claimId collectionId agentDid agentAddress submissionDate paymentsStatus "
    "amount cw20Payment cw1155Payment "
    "evaluation { status reason oracle agentAddress evaluationDate amount cw20Payment "
    "cw1155Payment }"
)
COLLECTION_FIELDS = (
    "id entity admin protocol state startDate endDate quota count evaluated approved "
    "rejected disputed invalidated flagged payments escrowAccount"
)
ENTITY_FIELDS = (
    "id type status owner startDate endDate entityVerified relayerNode externalId metadata accounts"
)
IID_FIELDS = (
    "id controller verificationMethod service linkedResource linkedEntity alsoKnownAs metadata"
)
TX_FIELDS = (
    "hash height time code memo fee feePayer "
    "transactionSignersByTransactionId { nodes { signerAddress } } "
    f"messagesByTransactionHash(first: {MAX_TX_MESSAGES + 1}, orderBy: [ID_ASC]) "
    "{ totalCount nodes { typeUrl value } }"
)
TOKEN_BALANCE_FIELDS = (
    "tokenId amount retired token { name collection tokenClassByName { class contractAddress } }"
)
PAGE_INFO = "pageInfo { hasNextPage endCursor }"


def string(value: CheckedId) -> str:
    """A GraphQL string literal of a checked value.

    Raises:
        TypeError: ``value`` is not a ``CheckedId`` (nothing unchecked is written).
    """
    if not isinstance(value, CheckedId):
        raise TypeError("only checked ids are written into a query")
    # Checked values hold no quote, backslash or control character; JSON string
    # syntax is GraphQL string syntax for them.
    return json.dumps(value.value)


def integer(value: int) -> str:
    """A GraphQL integer literal.

    Raises:
        TypeError: ``value`` is not an ``int``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("only integers are written as integer literals")
    return str(value)


def equal_to(field: str, value: CheckedId) -> str:
    """``field: {equalTo: "…"}``."""
    return f"{field}: {{equalTo: {string(value)}}}"


def connection(
    root: str,
    filters: list[str],
    fields: str,
    *,
    first: int,
    order_by: str | None = None,
    after: CheckedId | None = None,
    page_info: bool = True,
) -> str:
    """A root connection field: ``root(filter: {…}, first: n, …) { nodes { … } … }``."""
    args = [f"filter: {{{', '.join(filters)}}}", f"first: {integer(first)}"]
    if order_by:
        args.append(f"orderBy: [{order_by}]")
    if after is not None:
        args.append(f"after: {string(after)}")
    tail = f" {PAGE_INFO}" if page_info else ""
    return f"{root}({', '.join(args)}) {{ nodes {{ {fields} }}{tail} }}"


def document(fields: dict[str, str]) -> str:
    """The query: ``query ChainLookup { r0: … r1: … }`` with one aliased field per request."""
    body = "\n".join(f"  {alias}: {field}" for alias, field in fields.items())
    return f"query ChainLookup {{\n{body}\n}}"
