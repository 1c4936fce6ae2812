"""Capability matching (UCAN-27): abilities, resources, caveats and ``CapabilityDef``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import BaseModel, Field

from oracle_ucan import (
    CapabilityDef,
    ability_covers,
    default_caveats,
    resource_covers,
    resource_names_did,
)

# --- abilities ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("granted", "claimed", "covered"),
    [
        # A granted "*" covers everything, including "*".
        ("*", "*", True),
        ("*", "memory/read", True),
        ("*", "mcp/call", True),
        # Equal abilities.
        ("memory/read", "memory/read", True),
        ("mcp/call", "mcp/call", True),
        # A namespace wildcard covers its namespace.
        ("memory/*", "memory/read", True),
        ("memory/*", "memory/write", True),
        ("memory/*", "memory/*", True),
        ("memory/*", "memory/sub/op", True),
        # A claimed "*" is covered only by a granted "*".
        ("memory/*", "*", False),
        ("memory/read", "*", False),
        ("mcp/call", "*", False),
        # Other namespaces, narrower grants, near misses.
        ("memory/*", "store/read", False),
        ("memory/read", "memory/write", False),
        ("memory/read", "memory/*", False),
        ("memory/*", "memory", False),
        ("memory/*", "memoryx/read", False),
        ("memory/*", "Memory/read", False),
        ("memory/read", "memory/read/x", False),
    ],
)
def test_ability_table(granted: str, claimed: str, covered: bool) -> None:
    assert ability_covers(granted, claimed) is covered


@pytest.mark.parametrize(
    ("granted", "claimed", "covered"),
    [
        # Only a trailing "/*" is a wildcard: "store/" and "store/a*" are literal abilities.
        ("store/", "store/add", False),
        ("store/", "store/", True),
        ("store/a*", "store/add", False),
        ("store/a*", "store/a*", True),
        ("store*", "store/add", False),
        ("store/*", "store/", True),
        ("store/*", "store", False),
        ("store/*", "storefront/add", False),
        ("*/add", "store/add", False),
        ("", "store/add", False),
        ("store/add", "", False),
    ],
)
def test_ability_prefix_edge_cases(granted: str, claimed: str, covered: bool) -> None:
    assert ability_covers(granted, claimed) is covered


# --- resources ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("granted", "claimed", "covered"),
    [
        ("ixo:memory", "ixo:memory", True),
        ("urn:a/b", "urn:a/b", True),
        # "/*" and ":*" wildcards cover what starts with the prefix before the "*".
        ("urn:a/*", "urn:a/b", True),
        ("urn:a/*", "urn:a/b/c", True),
        ("urn:a/*", "urn:a/", True),
        ("ixo:oracle:*", "ixo:oracle:did:ixo:entity:mcp/srv/tool", True),
        ("ixo:*", "ixo:memory", True),
        ("ixo:entity:*", "ixo:entity:42", True),
        ("https://svc.example/*", "https://svc.example/a/b", True),
        # "ucan:*" covers any resource.
        ("ucan:*", "ixo:memory", True),
        ("ucan:*", "urn:anything/at/all", True),
        ("ucan:*", "did:key:z6MkExample", True),
        # Near misses.
        ("urn:a/*", "urn:a", False),
        ("urn:a/*", "urn:ab/c", False),
        ("ixo:oracle:*", "ixo:oracle", False),
        ("ixo:oracle:*", "ixo:oraclex:y", False),
        ("urn:a/b", "urn:a/b/c", False),
        ("urn:a/b", "urn:a/*", False),
        ("urn:a*", "urn:ab", False),  # "*" after neither "/" nor ":" is literal
        ("*", "urn:a/b", False),  # a bare "*" is not a resource wildcard
        ("ucan:x", "urn:a/b", False),
        ("ixo:memory", "ixo:memory2", False),
        ("ixo:entity:1", "ixo:entity:10", False),  # equality, not a prefix
        ("ixo:entity:1", "ixo:entity:2", False),
        ("*", "ixo:entity:1", False),
        ("https://svc.example/*", "https://other.example/a", False),
        ("https://svc.example/*", "https://svc.example.evil/a", False),
    ],
)
def test_resource_table(granted: str, claimed: str, covered: bool) -> None:
    assert resource_covers(granted, claimed) is covered


# --- caveats -----------------------------------------------------------------------------


OWNER = "did:web:victim.co"


@pytest.mark.parametrize(
    ("resource", "named"),
    [
        (OWNER, True),
        (f"{OWNER}/notes", True),
        (f"ixo:{OWNER}", True),
        (f"ixo:memory/{OWNER}", True),
        (f"ixo:memory/{OWNER}/notes/today", True),
        (f"ixo:memory/a/{OWNER}", True),
        (f"ixo:memory/{OWNER}/x?owner=1", True),
        # A later occurrence may be the whole segment even when an earlier one is not.
        (f"ixo:memory/x{OWNER}/{OWNER}", True),
        (f"ixo:memory/{OWNER}:users:alice", False),
        (f"ixo:memory/{OWNER}?owner=1", False),
        (f"ixo:memory/{OWNER}#notes", False),
        ("ixo:memory/xdid:web:victim.co", False),
        (f"ixo:memory/{OWNER}.evil.example", False),
        (f"ixo:memory/{OWNER}%2F", False),
        (f"ixo:memory?owner=/{OWNER}", False),
        (f"ixo:memory#/{OWNER}", False),
        (f"ixo:oracle:{OWNER}:mcp/files", False),
        (f"ixo:memory:{OWNER}", False),
        ("ixo:memory", False),
        ("", False),
    ],
)
def test_resource_names_did_as_a_whole_segment(resource: str, named: bool) -> None:
    assert resource_names_did(resource, OWNER) is named


def test_an_empty_did_names_nothing() -> None:
    assert resource_names_did("ixo:memory/", "") is False


def test_default_caveats_pass_without_caveats() -> None:
    assert default_caveats({"can": "a/b", "with": "urn:x"}, {"can": "a/b", "with": "urn:x"}) is None


def test_default_caveats_pass_when_each_granted_caveat_is_repeated_equal() -> None:
    claimed = {"nb": {"limit": 5, "tag": "x", "extra": True}}
    granted = {"nb": {"limit": 5, "tag": "x"}}
    assert default_caveats(claimed, granted) is None


def test_default_caveats_ignore_caveats_only_the_claim_has() -> None:
    assert default_caveats({"nb": {"limit": 5}}, {}) is None
    assert default_caveats({"nb": {"limit": 5}}, {"nb": {}}) is None


def test_default_caveats_refuse_a_different_value() -> None:
    assert default_caveats({"nb": {"limit": 4}}, {"nb": {"limit": 5}}) == "limit: 4 violates 5"


def test_default_caveats_refuse_a_missing_caveat() -> None:
    assert default_caveats({}, {"nb": {"limit": 5}}) == "limit: None violates 5"
    assert default_caveats({"nb": {"other": 5}}, {"nb": {"limit": 5}}) == ("limit: None violates 5")


def test_default_caveats_report_the_first_differing_caveat() -> None:
    violation = default_caveats({"nb": {"a": 1, "b": 9}}, {"nb": {"a": 1, "b": 2}})
    assert violation == "b: 9 violates 2"


# --- CapabilityDef -----------------------------------------------------------------------


def _at_most_limit(claimed: Mapping[str, Any], granted: Mapping[str, Any]) -> str | None:
    limit = (granted.get("nb") or {}).get("limit")
    wanted = (claimed.get("nb") or {}).get("limit")
    if limit is None:
        return None
    if wanted is None or wanted > limit:
        return f"limit {wanted} exceeds {limit}"
    return None


class LimitCaveats(BaseModel):
    limit: int = Field(ge=0)


def test_capability_def_defaults() -> None:
    definition = CapabilityDef("mcp/call")
    assert definition.can == "mcp/call"
    assert definition.protocol == "urn:"
    assert definition.nb_model is None
    assert definition.derives is None


def test_caveat_violation_uses_the_default_rule_without_derives() -> None:
    definition = CapabilityDef("a/b")
    assert definition.caveat_violation({"nb": {"x": 1}}, {"nb": {"x": 1}}) is None
    assert definition.caveat_violation({"nb": {"x": 2}}, {"nb": {"x": 1}}) == "x: 2 violates 1"


def test_caveat_violation_uses_derives_when_given() -> None:
    definition = CapabilityDef("a/b", derives=_at_most_limit)
    # Fewer is fine under this rule, though ucanto's equality rule would refuse it.
    assert definition.caveat_violation({"nb": {"limit": 3}}, {"nb": {"limit": 5}}) is None
    assert definition.caveat_violation({"nb": {"limit": 5}}, {"nb": {"limit": 5}}) is None
    assert definition.caveat_violation({"nb": {"limit": 6}}, {"nb": {"limit": 5}}) == (
        "limit 6 exceeds 5"
    )


def test_a_crashing_caveat_check_is_a_violation_not_an_exception() -> None:
    def crashes(claimed: Mapping[str, Any], granted: Mapping[str, Any]) -> str | None:
        raise KeyError("nb")

    definition = CapabilityDef("a/b", derives=crashes)
    assert definition.caveat_violation({}, {}) == "caveat check failed: KeyError"


def test_malformed_accepts_a_fitting_claim() -> None:
    definition = CapabilityDef("mcp/call", protocol="ixo:", nb_model=LimitCaveats)
    claim = {"can": "mcp/call", "with": "ixo:oracle:x", "nb": {"limit": 2}}
    assert definition.malformed(claim) is None


def test_malformed_refuses_another_ability() -> None:
    definition = CapabilityDef("mcp/call")
    assert definition.malformed({"can": "mcp/list", "with": "urn:x"}) == (
        "ability 'mcp/list' is not 'mcp/call'"
    )


def test_malformed_refuses_a_resource_of_another_scheme() -> None:
    definition = CapabilityDef("mcp/call", protocol="ixo:")
    assert definition.malformed({"can": "mcp/call", "with": "urn:x"}) == (
        "resource must be a ixo: URI"
    )
    assert definition.malformed({"can": "mcp/call"}) == "resource must be a ixo: URI"


def test_malformed_checks_caveats_against_the_model() -> None:
    definition = CapabilityDef("mcp/call", nb_model=LimitCaveats)
    negative = definition.malformed({"can": "mcp/call", "with": "urn:x", "nb": {"limit": -1}})
    assert negative is not None
    assert negative.startswith("invalid caveats: ")
    assert "greater than or equal to 0" in negative
    missing = definition.malformed({"can": "mcp/call", "with": "urn:x"})
    assert missing == "invalid caveats: Field required"


def test_capability_def_is_immutable() -> None:
    definition = CapabilityDef("mcp/call")
    with pytest.raises(AttributeError):
        definition.can = "other"  # type: ignore[misc]
