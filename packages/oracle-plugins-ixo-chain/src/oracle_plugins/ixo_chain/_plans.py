"""One plan per ``chain_lookup`` request: its root field, how to read it, whose it is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oracle_plugins.ixo_chain import _graphql as gql
from oracle_plugins.ixo_chain._ids import (
    CheckedId,
    IdError,
    check_account,
    check_claim_id,
    check_collection_id,
    check_cursor,
    check_did,
    check_entity_id,
    check_tx_hash,
)
from oracle_plugins.ixo_chain._schema import (
    MAX_FIRST,
    ClaimCollectionRequest,
    ClaimCollectionsRequest,
    ClaimRequest,
    ClaimsRequest,
    DidDocumentRequest,
    EntitiesRequest,
    EntityRequest,
    ReceivedTransactionsRequest,
    SentTransactionsRequest,
    TokenBalancesRequest,
    TransactionRequest,
)
from oracle_plugins.ixo_chain._shapes import (
    claim_data,
    collection_data,
    did_document_data,
    entity_data,
    token_balance_data,
    transaction_data,
    transaction_signers,
)
from oracle_plugins.ixo_chain._values import CLAIM_STATUS_CODES, Trim, as_dict

__all__ = ["NO_ADDRESS", "NotFound", "Plan", "User", "plan_request"]

NO_ADDRESS = "the user has no IXO account address; give one"
TOKEN_BALANCES_PAGE = 50
Shape = Callable[[dict[str, Any], Trim], dict[str, Any]]


class NotFound(Exception):
    """A read by id found nothing; the message is the detail for the model."""


@dataclass(frozen=True)
class User:
    """Who is asking: their DID and, for ``did:ixo:ixo1…`` users, their address."""

    did: str
    address: str | None


@dataclass(frozen=True)
class Plan:
    """How one request is asked and answered.

    Attributes:
        kind: The request's kind.
        field: The root field (without alias), values written as checked literals.
        shape: Turns the field's value into ``data``.
        subject: ``user``/``other`` when known before the read.
        subject_of: Learns the subject from the field's value (reads by id).
        first: The page size, for paged kinds.
    """

    kind: str
    field: str
    shape: Shape
    subject: str | None = None
    subject_of: Callable[[dict[str, Any]], str] | None = None
    first: int | None = None


def _nodes(value: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = value.get("nodes")
    return [n for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else []


def _page(value: dict[str, Any]) -> dict[str, Any]:
    info = as_dict(value.get("pageInfo"))
    cursor = info.get("endCursor")
    return {
        "hasNextPage": bool(info.get("hasNextPage")),
        "endCursor": cursor if isinstance(cursor, str) else None,
    }


def _single(what: str, convert: Shape) -> Shape:
    def shape(value: dict[str, Any], trim: Trim) -> dict[str, Any]:
        nodes = _nodes(value)
        if not nodes:
            raise NotFound(f"No {what} is indexed by IXO Blocksync.")
        return convert(nodes[0], trim)

    return shape


def _listing(key: str, convert: Shape, *, paged: bool = True, **extra: Any) -> Shape:
    def shape(value: dict[str, Any], trim: Trim) -> dict[str, Any]:
        data: dict[str, Any] = {key: [convert(n, trim) for n in _nodes(value)], **extra}
        page = _page(value)
        if paged:
            data.update(page)
        elif page["hasNextPage"]:
            trim.cut = True
        return data

    return shape


def _account(value: str | None, user: User) -> CheckedId:
    if value is None:
        if user.address is None:
            raise IdError(NO_ADDRESS)
        return CheckedId(user.address, "account")
    return check_account(value)


def _whose(account: CheckedId, user: User) -> str:
    return "user" if account.value == user.address else "other"


def _first_node_field(field: str, user_values: Callable[[User], set[str]], user: User) -> Any:
    def subject_of(value: dict[str, Any]) -> str:
        nodes = _nodes(value)
        found = nodes[0].get(field) if nodes else None
        return "user" if found is not None and found in user_values(user) else "other"

    return subject_of


def _address_of(user: User) -> set[str]:
    return {user.address} if user.address else set()


def _address_or_did(user: User) -> set[str]:
    return _address_of(user) | {user.did}


def _after(value: str | None) -> CheckedId | None:
    return None if value is None else check_cursor(value)


def _claims(req: ClaimsRequest, user: User) -> Plan:
    agent = _account(req.agent, user)
    filters = [gql.equal_to("agentAddress", agent)]
    if req.collection is not None:
        filters.append(gql.equal_to("collectionId", check_collection_id(req.collection)))
    if req.status is not None:
        code = gql.integer(CLAIM_STATUS_CODES[req.status])
        evaluated = f"evaluation: {{status: {{equalTo: {code}}}}}"
        # An unevaluated claim has no evaluation row at all.
        pending = f"or: [{{evaluationExists: false}}, {{{evaluated}}}]"
        filters.append(pending if req.status == "pending" else evaluated)
    field = gql.connection(
        "claims",
        filters,
        gql.CLAIM_FIELDS,
        first=req.first,
        order_by="SUBMISSION_DATE_DESC, CLAIM_ID_DESC",
        after=_after(req.after),
    )
    return Plan(
        req.kind, field, _listing("claims", claim_data), _whose(agent, user), None, req.first
    )


def _claim(req: ClaimRequest, user: User) -> Plan:
    claim = check_claim_id(req.id)
    field = gql.connection(
        "claims", [gql.equal_to("claimId", claim)], gql.CLAIM_FIELDS, first=1, page_info=False
    )
    subject = _first_node_field("agentAddress", _address_of, user)
    return Plan(req.kind, field, _single("claim with that id", claim_data), subject_of=subject)


def _collections(req: ClaimCollectionsRequest, user: User) -> Plan:
    filters = []
    subject = None
    if req.entity is not None:
        filters.append(gql.equal_to("entity", check_entity_id(req.entity)))
    if req.admin is not None or req.entity is None:
        admin = _account(req.admin, user)
        filters.append(gql.equal_to("admin", admin))
        subject = _whose(admin, user)
    field = gql.connection(
        "claimCollections", filters, gql.COLLECTION_FIELDS, first=MAX_FIRST, order_by="ID_ASC"
    )
    shape = _listing("collections", collection_data, paged=False)
    return Plan(req.kind, field, shape, subject)


def _collection(req: ClaimCollectionRequest, user: User) -> Plan:
    collection = check_collection_id(req.id)
    field = gql.connection(
        "claimCollections",
        [gql.equal_to("id", collection)],
        gql.COLLECTION_FIELDS,
        first=1,
        page_info=False,
    )
    subject = _first_node_field("admin", _address_of, user)
    shape = _single("claim collection with that id", collection_data)
    return Plan(req.kind, field, shape, subject_of=subject)


def _entity(req: EntityRequest, user: User) -> Plan:
    entity = check_entity_id(req.id)
    field = gql.connection(
        "entities", [gql.equal_to("id", entity)], gql.ENTITY_FIELDS, first=1, page_info=False
    )
    subject = _first_node_field("owner", _address_or_did, user)
    return Plan(req.kind, field, _single("entity with that id", entity_data), subject_of=subject)


def _entities(req: EntitiesRequest, user: User) -> Plan:
    owner = _account(req.owner, user)
    field = gql.connection(
        "entities",
        [gql.equal_to("owner", owner)],
        gql.ENTITY_FIELDS,
        first=req.first,
        order_by="ID_ASC",
        after=_after(req.after),
    )
    # Entity ids are hashes: their order says nothing about age.
    shape = _listing("entities", entity_data, orderedBy="id (text)")
    return Plan(req.kind, field, shape, _whose(owner, user), None, req.first)


def _did_document(req: DidDocumentRequest, user: User) -> Plan:
    did = check_did(req.did)
    field = gql.connection(
        "iids", [gql.equal_to("id", did)], gql.IID_FIELDS, first=1, page_info=False
    )
    subject = _first_node_field("id", lambda u: {u.did}, user)
    shape = _single("DID document for that DID", did_document_data)
    return Plan(req.kind, field, shape, subject_of=subject)


def _transaction(req: TransactionRequest, user: User) -> Plan:
    tx_hash = check_tx_hash(req.hash)
    field = gql.connection(
        "transactions",
        [gql.equal_to("hash", tx_hash)],
        gql.TX_FIELDS,
        first=1,
        order_by="HEIGHT_DESC",
        page_info=False,
    )

    def subject_of(value: dict[str, Any]) -> str:
        nodes = _nodes(value)
        signed = bool(nodes) and user.address in transaction_signers(nodes[0])
        return "user" if signed else "other"

    shape = _single("transaction with that hash", transaction_data)
    return Plan(req.kind, field, shape, subject_of=subject_of)


def _sent(req: SentTransactionsRequest, user: User) -> Plan:
    account = _account(req.account, user)
    signer = gql.equal_to("signerAddress", account)
    field = gql.connection(
        "transactions",
        [f"transactionSignersByTransactionId: {{some: {{{signer}}}}}"],
        gql.TX_FIELDS,
        first=req.first,
        order_by="HEIGHT_DESC",
        after=_after(req.after),
    )
    shape = _listing("transactions", transaction_data)
    return Plan(req.kind, field, shape, _whose(account, user), None, req.first)


def _received_shape(value: dict[str, Any], trim: Trim) -> dict[str, Any]:
    seen: set[Any] = set()
    transactions = []
    for message in _nodes(value):
        tx = message.get("transactionByTransactionHash")
        # Several messages of one transaction may pay the account: list it once.
        if isinstance(tx, dict) and tx.get("hash") not in seen:
            seen.add(tx.get("hash"))
            transactions.append(transaction_data(tx, trim))
    return {"transactions": transactions, **_page(value)}


def _received(req: ReceivedTransactionsRequest, user: User) -> Plan:
    account = _account(req.account, user)
    field = gql.connection(
        "messages",
        [gql.equal_to("to", account)],
        f"transactionByTransactionHash {{ {gql.TX_FIELDS} }}",
        first=req.first,
        order_by="ID_DESC",
        after=_after(req.after),
    )
    return Plan(req.kind, field, _received_shape, _whose(account, user), None, req.first)


def _token_balances(req: TokenBalancesRequest, user: User) -> Plan:
    account = _account(req.account, user)
    field = gql.connection(
        "tokenBalances",
        [gql.equal_to("address", account)],
        gql.TOKEN_BALANCE_FIELDS,
        first=TOKEN_BALANCES_PAGE,
        order_by="TOKEN_ID_ASC",
    )
    shape = _listing("tokens", token_balance_data, paged=False)
    return Plan(req.kind, field, shape, _whose(account, user))


_PLANNERS: dict[str, Callable[[Any, User], Plan]] = {
    "claims": _claims,
    "claim": _claim,
    "claim_collections": _collections,
    "claim_collection": _collection,
    "entity": _entity,
    "entities": _entities,
    "did_document": _did_document,
    "transaction": _transaction,
    "sent_transactions": _sent,
    "received_transactions": _received,
    "token_balances": _token_balances,
}


def plan_request(request: Any, user: User) -> Plan:
    """The plan of one validated request.

    Raises:
        IdError: An id or account fails its pattern (the request answers
            ``invalid_input``; the others still run).
    """
    return _PLANNERS[request.kind](request, user)
