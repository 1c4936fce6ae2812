"""Same seeds, same fields: ucanto and oracle-ucan emit the same bytes (UCAN-12, UCAN-36 (5)).

Every case is minted twice, by ucanto in Node and by ``oracle_ucan`` in Python, from the
same 32-byte seeds and the same explicit fields (no random nonce, fixed times): the UCAN
blocks, their CIDs, the block order and the whole CAR archives must be identical. Each
ucanto archive must also decode in Python with its signature verifying, read back the
fields ucanto reports, and re-encode byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from multiformats.cid import CID

from oracle_ucan import Delegation, Ed25519Signer, cid_for, dag_cbor, delegate, invoke

Ucanto = Callable[[list[dict[str, Any]]], dict[str, Any]]

ROOT = bytes(range(32))
ALICE = bytes([0xA1]) * 32
BOB = bytes(range(255, 223, -1))
SERVICE = Ed25519Signer(bytes([0x5E]) * 32).did()
ORACLE = "did:ixo:ixo1interoporacle0000000000000000000000"
USER = "did:ixo:ixo1interopuser00000000000000000000000"
EXPIRES = 1_900_000_000
NOT_BEFORE = 1_800_000_000
LINKED = cid_for(b"a block referenced from a caveat")


@dataclass(frozen=True)
class Mint:
    """One delegation (or invocation) to mint in both stacks."""

    name: str
    issuer: bytes
    audience: str
    capabilities: list[dict[str, Any]]
    expiration: int | None = EXPIRES
    issuer_did: str | None = None
    not_before: int | None = None
    nonce: str | None = None
    facts: list[dict[str, Any]] = field(default_factory=list)
    proofs: tuple[str, ...] = ()
    invocation: bool = False


CASES = [
    Mint(
        "delegation",
        ROOT,
        Ed25519Signer(ALICE).did(),
        [{"with": "ixo:memory", "can": "memory/*", "nb": {"limit": 10, "scope": ["a", "b"]}}],
        not_before=NOT_BEFORE,
        nonce="8f1e2d3c4b5a6978",
        facts=[{"purpose": "interop", "n": 1}],
    ),
    Mint(
        "chain",
        ALICE,
        Ed25519Signer(BOB).did(),
        [{"with": "ixo:memory", "can": "memory/read", "nb": {"limit": 5}}],
        expiration=EXPIRES - 100,
        proofs=("delegation",),
    ),
    Mint(
        "invocation",
        BOB,
        SERVICE,
        [{"with": "ixo:memory", "can": "memory/read", "nb": {"limit": 1}}],
        expiration=EXPIRES - 200,
        proofs=("chain",),
        invocation=True,
    ),
    Mint(
        "ixo_principals",
        ROOT,
        USER,
        [{"with": "ixo:sandbox", "can": "*"}],
        issuer_did=ORACLE,
    ),
    Mint(
        "ixo_invocation_with_ixo_proof",
        ALICE,
        SERVICE,
        [{"with": "ixo:sandbox", "can": "*"}],
        issuer_did=USER,
        proofs=("ixo_principals",),
        invocation=True,
    ),
    Mint(
        "proofs_sharing_blocks",
        BOB,
        SERVICE,
        [{"with": "ixo:memory", "can": "memory/read"}],
        proofs=("chain", "delegation"),
        invocation=True,
    ),
    Mint("never_expires", ROOT, ORACLE, [{"with": "ixo:skills", "can": "*"}], expiration=None),
    Mint(
        "several_capabilities",
        ROOT,
        ORACLE,
        [
            {"with": "ixo:sandbox", "can": "*"},
            {"with": "ixo:memory", "can": "memory/*", "nb": {}},
            {"with": "ixo:subscriptions", "can": "*", "nb": {"plan": {"tier": 2, "on": True}}},
            {"with": f"ixo:oracle:{ORACLE}:mcp/*", "can": "mcp/call", "nb": {"x": None}},
        ],
    ),
    Mint(
        "unicode_values",
        ROOT,
        ORACLE,
        [
            {
                "with": "ixo:memory",
                "can": "memory/write",
                "nb": {"room": "!é✓🙂:localhost", "note": 'tab\t"quote" \\ \u2028 \u0007 \x7f'},
            }
        ],
        nonce="n°1",
        facts=[{"title": "Grüße 👋", "lang": "ру́сский 中文"}],
    ),
    Mint(
        "bytes_and_links",
        ROOT,
        ORACLE,
        [
            {
                "with": "ixo:memory",
                "can": "memory/read",
                "nb": {"blob": b"\x00\xff\x10", "ref": LINKED},
            }
        ],
        facts=[{"digest": b"\x01" * 33, "link": LINKED}],
    ),
    Mint(
        "float_fractions",
        ROOT,
        ORACLE,
        [{"with": "ixo:memory", "can": "memory/read", "nb": {"ratio": 0.25, "delta": -2.5}}],
    ),
    # Edges of the JSON that signatures cover: key order beyond ASCII (JavaScript sorts by
    # UTF-16 code unit), JavaScript's number formatting, and falsy optional fields (ucanto
    # drops nbf 0 from the block but keeps nnc "" there, while leaving both out of the
    # signed payload).
    Mint(
        "unicode_keys",
        ROOT,
        ORACLE,
        [{"with": "ixo:memory", "can": "memory/read", "nb": {"a": 1, "é": 2, "｡": 3, "😀": 4}}],
        facts=[{"note": "x", "ключ": "значение"}],
    ),
    Mint(
        "float_exponents",
        ROOT,
        ORACLE,
        [{"with": "ixo:memory", "can": "memory/read", "nb": {"small": 1e-7, "tiny": 0.00001}}],
    ),
    Mint(
        "float_large_integral",
        ROOT,
        ORACLE,
        [{"with": "ixo:memory", "can": "memory/read", "nb": {"big": 1.5e16}}],
    ),
    Mint(
        "float_notation",
        ROOT,
        ORACLE,
        [
            {
                "with": "ixo:memory",
                "can": "memory/read",
                "nb": {
                    "a": 1e21,
                    "b": 1.5e300,
                    "c": 123456.789,
                    "d": 5e-324,
                    "e": 2.0**53,
                    "f": 0.1 + 0.2,
                    "g": 1e-6,
                    "h": 1.2345e-7,
                    "i": 1e20,
                    "j": -7.25e-5,
                },
            }
        ],
    ),
    Mint(
        "zero_not_before",
        ROOT,
        ORACLE,
        [{"with": "ixo:memory", "can": "memory/read"}],
        not_before=0,
    ),
    Mint("empty_nonce", ROOT, ORACLE, [{"with": "ixo:memory", "can": "memory/read"}], nonce=""),
]
NAMES = [case.name for case in CASES]


def _request(case: Mint) -> dict[str, Any]:
    issuer: dict[str, Any] = {"seed": case.issuer.hex()}
    if case.issuer_did is not None:
        issuer["did"] = case.issuer_did
    request: dict[str, Any] = {
        "id": case.name,
        "op": "invoke" if case.invocation else "delegate",
        "issuer": issuer,
        "audience": case.audience,
        "expiration": case.expiration,
        "not_before": case.not_before,
        "nonce": case.nonce,
        "facts": case.facts,
        "proofs": [f"@{name}" for name in case.proofs],
    }
    if case.invocation:
        request["capability"] = case.capabilities[0]
    else:
        request["capabilities"] = case.capabilities
    return request


def _first_occurrences(blocks: list[list[str]]) -> list[list[str]]:
    """Blocks in archive order: ucanto's ``export()`` repeats a block reached twice; its
    archive, like a CAR writer, keeps the first."""
    first: dict[str, list[str]] = {}
    for block in blocks:
        first.setdefault(block[0], block)
    return list(first.values())


def _archive_order(delegation: Delegation) -> list[list[str]]:
    return _first_occurrences([[str(cid), data.hex()] for cid, data in delegation.iterate_blocks()])


@pytest.fixture(scope="module")
def ucanto_minted(ucanto: Ucanto) -> dict[str, Any]:
    """Every case minted by ucanto, in one Node process."""
    return ucanto([_request(case) for case in CASES])


def _mint(case: Mint, earlier: dict[str, Delegation]) -> Delegation:
    signer = Ed25519Signer(case.issuer)
    if case.issuer_did is not None:
        signer = signer.with_did(case.issuer_did)
    proofs = [earlier[name] for name in case.proofs]
    if case.invocation:
        return invoke(
            signer,
            audience=case.audience,
            capability=case.capabilities[0],
            expiration=case.expiration,
            proofs=proofs,
            not_before=case.not_before,
            nonce=case.nonce,
            facts=case.facts,
        )
    return delegate(
        signer,
        audience=case.audience,
        capabilities=case.capabilities,
        expiration=case.expiration,
        proofs=proofs,
        not_before=case.not_before,
        nonce=case.nonce,
        facts=case.facts,
    )


@pytest.fixture(scope="module")
def python_minted() -> dict[str, Delegation | Exception]:
    """Every case minted by oracle_ucan, or the exception minting it raised."""
    minted: dict[str, Delegation | Exception] = {}
    for case in CASES:
        try:
            proofs = {name: minted[name] for name in case.proofs}
            ready = {k: v for k, v in proofs.items() if isinstance(v, Delegation)}
            if len(ready) != len(proofs):
                raise AssertionError(f"a proof of {case.name} could not be minted")
            minted[case.name] = _mint(case, ready)
        except Exception as exc:  # reported by the test of that case, not the fixture
            minted[case.name] = exc
    return minted


@pytest.mark.parametrize("name", NAMES)
def test_same_block_cid_and_archive(
    name: str, ucanto_minted: dict[str, Any], python_minted: dict[str, Delegation | Exception]
) -> None:
    js = ucanto_minted[name]
    py = python_minted[name]
    assert isinstance(py, Delegation), f"oracle_ucan could not mint {name}: {py!r}"
    assert py.ucan.block.hex() == js["block"]
    assert str(py.cid) == js["cid"]
    assert _archive_order(py) == _first_occurrences(js["blocks"])
    assert py.to_base64() == js["token"]


@pytest.mark.parametrize("name", NAMES)
def test_ucanto_fixture_reencodes_byte_identically(
    name: str, ucanto_minted: dict[str, Any]
) -> None:
    token = ucanto_minted[name]["token"]
    assert Delegation.from_base64(token).to_base64() == token


@pytest.mark.parametrize("name", NAMES)
def test_python_reads_what_ucanto_wrote(name: str, ucanto_minted: dict[str, Any]) -> None:
    js = ucanto_minted[name]
    decoded = Delegation.from_base64(js["token"])
    ucan = decoded.ucan
    assert str(decoded.cid) == js["cid"]
    assert ucan.version == js["version"]
    assert ucan.issuer == js["issuer"]
    assert ucan.audience == js["audience"]
    assert [dict(c) for c in ucan.capabilities] == js["capabilities"]
    assert ucan.expiration == js["expiration"]
    assert ucan.not_before == js["not_before"]
    assert ucan.nonce == js["nonce"]
    assert [dict(f) for f in ucan.facts] == js["facts"]
    assert [str(p) for p in ucan.proofs] == js["proofs"]


@pytest.mark.parametrize("name", NAMES)
def test_python_verifies_ucanto_signature(name: str, ucanto_minted: dict[str, Any]) -> None:
    case = next(case for case in CASES if case.name == name)
    ucan = Delegation.from_base64(ucanto_minted[name]["token"]).ucan
    assert ucan.verify_with(Ed25519Signer(case.issuer).verifier)
    assert not ucan.verify_with(Ed25519Signer(bytes(32)).verifier)


@pytest.mark.parametrize(
    ("name", "issuer", "audience"),
    [
        ("ixo_principals", ORACLE, USER),
        ("ixo_invocation_with_ixo_proof", USER, SERVICE),
        ("delegation", Ed25519Signer(ROOT).did(), Ed25519Signer(ALICE).did()),
    ],
)
def test_principal_bytes(
    name: str, issuer: str, audience: str, ucanto_minted: dict[str, Any]
) -> None:
    """did:key principals are their multicodec key, others ``9d1a`` + the DID minus ``did:``."""

    def expected(did: str) -> bytes:
        if did.startswith("did:key:"):
            return b"\xed\x01" + _key_bytes(did)
        return bytes.fromhex("9d1a") + did[4:].encode()

    model = dag_cbor.decode(bytes.fromhex(ucanto_minted[name]["block"]))
    assert model["iss"] == expected(issuer)
    assert model["aud"] == expected(audience)


def _key_bytes(did: str) -> bytes:
    for seed in (ROOT, ALICE, BOB, bytes([0x5E]) * 32):
        signer = Ed25519Signer(seed)
        if signer.did() == did:
            return signer.verifier.public_key
    raise AssertionError(f"unknown test key {did}")


def test_proofs_are_links_to_the_proof_blocks(ucanto_minted: dict[str, Any]) -> None:
    model = dag_cbor.decode(bytes.fromhex(ucanto_minted["invocation"]["block"]))
    assert model["prf"] == [CID.decode(ucanto_minted["chain"]["cid"])]
    assert [cid for cid, _ in ucanto_minted["invocation"]["blocks"]] == [
        ucanto_minted["delegation"]["cid"],
        ucanto_minted["chain"]["cid"],
        ucanto_minted["invocation"]["cid"],
    ]
