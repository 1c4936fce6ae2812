"""Keys and DIDs agree with ucanto's ``@ucanto/principal`` (UCAN-15, 16, UCAN-36 (6)).

``Ed25519Signer(seed)`` matches ``ed25519.derive(seed)``; ``from_mnemonic`` matches the
derivation of ``@ixo/ucan``'s ``signerFromMnemonic``, ``ed25519.derive(sha256(utf8(
mnemonic.trim())))``; ``format``/``parse`` round-trip ucanto's private-key text both ways.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from oracle_ucan import Ed25519Signer

Ucanto = Callable[[list[dict[str, Any]]], dict[str, Any]]

SEEDS = {
    "zeros": bytes(32),
    "ones": b"\xff" * 32,
    "counting": bytes(range(32)),
    "mixed": bytes.fromhex("9d1a0c6e5b2f4a8e7d3c1b0a99887766554433221100ffeeddccbbaa00112233"),
}
WORDS = "abandon ability able about above absent absorb abstract absurd abuse access accident"
MNEMONICS = {
    "plain": WORDS,
    "surrounding_whitespace": f"  \t{WORDS}\n",
    "inner_whitespace_kept": WORDS.replace(" ", "  ", 1),
    "unicode_spaces": f"\u3000{WORDS}\u00a0\u2028",
    "twenty_four_words": f"{WORDS} {WORDS}",
    # Characters on which str.strip() and JavaScript's String.prototype.trim() disagree.
    "leading_byte_order_mark": f"\ufeff{WORDS}",
    "trailing_next_line": f"{WORDS}\u0085",
    "trailing_unit_separator": f"{WORDS}\x1f",
}
IXO_DID = "did:ixo:ixo1interopuser00000000000000000000000"


@pytest.fixture(scope="module")
def ucanto_principals(ucanto: Ucanto) -> dict[str, Any]:
    """ucanto's view of every seed, mnemonic and Python-formatted key, in one Node run."""
    requests: list[dict[str, Any]] = []
    for name, seed in SEEDS.items():
        requests.append({"id": f"seed:{name}", "op": "principal", "seed": seed.hex()})
        requests.append(
            {"id": f"key:{name}", "op": "principal", "key": Ed25519Signer(seed).format()}
        )
        requests.append(
            {"id": f"ixo:{name}", "op": "principal", "seed": seed.hex(), "did": IXO_DID}
        )
    for name, mnemonic in MNEMONICS.items():
        requests.append({"id": f"mnemonic:{name}", "op": "principal", "mnemonic": mnemonic})
    return ucanto(requests)


@pytest.mark.parametrize("name", SEEDS)
def test_same_seed_same_did(name: str, ucanto_principals: dict[str, Any]) -> None:
    assert Ed25519Signer(SEEDS[name]).did() == ucanto_principals[f"seed:{name}"]["did"]


@pytest.mark.parametrize("name", SEEDS)
def test_format_matches_ucanto(name: str, ucanto_principals: dict[str, Any]) -> None:
    assert Ed25519Signer(SEEDS[name]).format() == ucanto_principals[f"seed:{name}"]["format"]


@pytest.mark.parametrize("name", SEEDS)
def test_parse_reads_ucanto_format(name: str, ucanto_principals: dict[str, Any]) -> None:
    js = ucanto_principals[f"seed:{name}"]
    parsed = Ed25519Signer.parse(js["format"])
    assert parsed.did() == js["did"]
    assert parsed.format() == js["format"]
    assert parsed.sign(b"payload") == Ed25519Signer(SEEDS[name]).sign(b"payload")


@pytest.mark.parametrize("name", SEEDS)
def test_ucanto_parses_python_format(name: str, ucanto_principals: dict[str, Any]) -> None:
    signer = Ed25519Signer(SEEDS[name])
    assert ucanto_principals[f"key:{name}"]["did"] == signer.did()
    assert ucanto_principals[f"key:{name}"]["format"] == signer.format()


@pytest.mark.parametrize("name", SEEDS)
def test_with_did_matches_ucanto(name: str, ucanto_principals: dict[str, Any]) -> None:
    signer = Ed25519Signer(SEEDS[name]).with_did(IXO_DID)
    js = ucanto_principals[f"ixo:{name}"]
    assert signer.did() == js["did"] == IXO_DID
    assert signer.verifier.did() == js["key_did"] == ucanto_principals[f"seed:{name}"]["did"]


@pytest.mark.parametrize("name", MNEMONICS)
def test_from_mnemonic_matches_signer_from_mnemonic(
    name: str, ucanto_principals: dict[str, Any]
) -> None:
    js = ucanto_principals[f"mnemonic:{name}"]
    signer = Ed25519Signer.from_mnemonic(MNEMONICS[name])
    assert signer.did() == js["did"]
    assert signer.format() == js["format"]


def test_mnemonic_cases_are_distinct(ucanto_principals: dict[str, Any]) -> None:
    """Trimming is the only normalisation: inner whitespace changes the key."""
    dids = {name: ucanto_principals[f"mnemonic:{name}"]["did"] for name in MNEMONICS}
    assert dids["surrounding_whitespace"] == dids["plain"]
    assert dids["unicode_spaces"] == dids["plain"]
    assert dids["inner_whitespace_kept"] != dids["plain"]
    assert dids["twenty_four_words"] != dids["plain"]
