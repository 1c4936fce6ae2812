"""``chain_lookup``: every request of a call in one Blocksync document, answered one by one."""

from __future__ import annotations

import logging
from typing import Any

import httpx

from oracle_plugins.ixo_chain._graphql import document
from oracle_plugins.ixo_chain._http import Budget, ReadFailure, read_with_retry
from oracle_plugins.ixo_chain._ids import IdError
from oracle_plugins.ixo_chain._plans import NotFound, Plan, User, plan_request
from oracle_plugins.ixo_chain._schema import ChainLookupArgs
from oracle_plugins.ixo_chain._values import Trim, as_dict

__all__ = ["failure", "run_lookup"]

BLOCKSYNC = "IXO Blocksync"
INDEX_TIMEOUT = (
    "IXO Blocksync stopped this read at its 8-second limit: the account's history is too "
    "large to read in order. Ask for something narrower (one collection, one id, fewer items)."
)
ALIAS_FAILED = "IXO Blocksync could not answer this request."
# PostgreSQL's query_canceled (statement_timeout); PostGraphile passes it as errcode.
_STATEMENT_TIMEOUT_CODE = "57014"


def failure(kind: str, reason: str, detail: str, retryable: bool) -> dict[str, Any]:
    """A failed request's result."""
    return {"kind": kind, "ok": False, "reason": reason, "detail": detail, "retryable": retryable}


def _is_statement_timeout(error: dict[str, Any]) -> bool:
    extensions = as_dict(error.get("extensions"))
    codes = {str(extensions.get("errcode")), str(extensions.get("code")), str(error.get("errcode"))}
    message = str(error.get("message", "")).lower()
    return _STATEMENT_TIMEOUT_CODE in codes or "statement timeout" in message


def _errors_by_alias(errors: Any) -> tuple[dict[str, list[dict[str, Any]]], bool]:
    """Errors grouped by the alias their path starts with; whether any had no path."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    unplaced = False
    for error in errors if isinstance(errors, list) else []:
        if not isinstance(error, dict):
            continue
        path = error.get("path")
        if isinstance(path, list) and path and isinstance(path[0], str):
            grouped.setdefault(path[0], []).append(error)
        else:
            unplaced = True
    return grouped, unplaced


def _answer(kind: str, plan: Plan, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        return failure(kind, "upstream_error", ALIAS_FAILED, False)
    trim = Trim()
    try:
        data = plan.shape(value, trim)
    except NotFound as exc:
        return failure(kind, "not_found", str(exc), False)
    result: dict[str, Any] = {"kind": kind, "ok": True}
    subject = plan.subject_of(value) if plan.subject_of is not None else plan.subject
    if subject is not None:
        result["subject"] = subject
    if plan.first is not None:
        result["first"] = plan.first
    result["data"] = data
    if trim.cut:
        result["truncated"] = True
    return result


async def run_lookup(
    args: ChainLookupArgs,
    *,
    user: User,
    base: dict[str, Any],
    client: httpx.AsyncClient,
    graphql_url: str | None,
    budget: Budget,
    logger: logging.Logger,
) -> dict[str, Any]:
    """Answer every request of the call.

    Args:
        args: The validated call.
        user: Who is asking (for account defaults and ``subject``).
        base: ``network``, ``source`` and ``fetchedAt`` of the answer.
        client: HTTP client.
        graphql_url: ``BLOCKSYNC_GRAPHQL_URL``; ``None`` answers ``upstream_error``.
        budget: The call's wall-clock budget.
        logger: For one warning per failed attempt (no user data).

    Returns:
        ``{ok: true, …, results}``, or ``{ok: false, …, reason, detail, retryable}`` when
        the Blocksync request as a whole failed after its retry.
    """
    results: list[dict[str, Any] | None] = [None] * len(args.requests)
    plans: dict[str, tuple[int, Plan]] = {}
    for index, request in enumerate(args.requests):
        try:
            plans[f"r{index}"] = (index, plan_request(request, user))
        except IdError as exc:
            results[index] = failure(request.kind, "invalid_input", f"{exc}.", False)
    if plans:
        whole = await _ask(plans, results, client, graphql_url, budget, logger)
        if whole is not None:
            return {"ok": False, **base, **whole}
    return {"ok": True, **base, "results": results}


async def _ask(
    plans: dict[str, tuple[int, Plan]],
    results: list[dict[str, Any] | None],
    client: httpx.AsyncClient,
    graphql_url: str | None,
    budget: Budget,
    logger: logging.Logger,
) -> dict[str, Any] | None:
    """Send the document and fill ``results``; the whole-answer failure, if any."""
    if graphql_url is None:
        detail = f"{BLOCKSYNC} is not configured on this oracle (BLOCKSYNC_GRAPHQL_URL)."
        return {"reason": "upstream_error", "detail": detail, "retryable": False}
    query = document({alias: plan.field for alias, (_, plan) in plans.items()})
    try:
        response = await read_with_retry(
            lambda: client.post(graphql_url, json={"query": query}),
            read="blocksync",
            service=BLOCKSYNC,
            budget=budget,
            logger=logger,
        )
        body = response.json()
        if not isinstance(body, dict):
            raise ValueError("not an object")
    except ReadFailure as exc:
        return {"reason": exc.reason, "detail": exc.detail, "retryable": exc.retryable}
    except ValueError:
        logger.warning("[ixo-chain] blocksync attempt 1 failed: invalid JSON")
        detail = f"{BLOCKSYNC} gave an answer that is not GraphQL."
        return {"reason": "upstream_error", "detail": detail, "retryable": False}
    data = body.get("data")
    grouped, unplaced = _errors_by_alias(body.get("errors"))
    if not isinstance(data, dict):
        # The document as a whole was refused (a schema mismatch, an HTTP 4xx).
        logger.warning("[ixo-chain] blocksync attempt 1 failed: %s", response.status_code)
        detail = f"{BLOCKSYNC} refused the query (HTTP {response.status_code})."
        return {"reason": "upstream_error", "detail": detail, "retryable": False}
    for alias, (index, plan) in plans.items():
        errors = grouped.get(alias, [])
        if errors or (unplaced and data.get(alias) is None):
            timeout = any(_is_statement_timeout(e) for e in errors)
            cause = "statement timeout" if timeout else "GraphQL error"
            logger.warning("[ixo-chain] blocksync %s attempt 1 failed: %s", plan.kind, cause)
            if timeout:
                results[index] = failure(plan.kind, "index_timeout", INDEX_TIMEOUT, False)
            else:
                results[index] = failure(plan.kind, "upstream_error", ALIAS_FAILED, False)
            continue
        results[index] = _answer(plan.kind, plan, data.get(alias))
    return None
