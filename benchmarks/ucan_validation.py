"""UCAN validation throughput: a 2-link chain, cold and cached, against raw Ed25519.

A 2-link chain (root → alice, alice → bob) carries two signatures, so the physical limit
of cold validation is half the raw Ed25519 verifications per second of one core,
measured here in the same run. "Cold" validates distinct archives never seen before
(nothing decoded or verified yet); "cached" validates them again, with the verified
proofs and decoded archives remembered.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from oracle_ucan import ChainVerifier, Ed25519Signer, delegate, validate_delegation
from oracle_ucan import ucan as ucan_module
from oracle_ucan import validator as validator_module

CHAINS = 1500
ROUNDS = 3


def _chains(count: int) -> tuple[list[str], str]:
    root = Ed25519Signer.from_mnemonic("benchmark root")
    alice = Ed25519Signer.from_mnemonic("benchmark alice")
    bob = Ed25519Signer.from_mnemonic("benchmark bob")
    expiry = int(time.time()) + 3600
    tokens = []
    for index in range(count):
        first = delegate(
            root,
            audience=alice.did(),
            capabilities=[{"with": "urn:memory/*", "can": "memory/*", "nb": {"limit": 10}}],
            expiration=expiry,
            nonce=f"a{index}",
        )
        second = delegate(
            alice,
            audience=bob.did(),
            capabilities=[{"with": "urn:memory/alice/*", "can": "memory/read"}],
            expiration=expiry,
            proofs=[first],
            nonce=f"b{index}",
        )
        tokens.append(second.to_base64())
    return tokens, bob.did()


def _raw_verifies_per_second(count: int) -> float:
    signer = Ed25519Signer.from_mnemonic("benchmark raw")
    payload = b"x" * 400
    signature = signer.sign(payload)
    verifier = signer.verifier
    start = time.perf_counter()
    for _ in range(count):
        verifier.verify(signature, payload)
    return count / (time.perf_counter() - start)


async def _validate_all(tokens: list[str], audience: str, verifier: ChainVerifier) -> float:
    start = time.perf_counter()
    for token in tokens:
        result = await validate_delegation(token, audience=audience, verifier=verifier)
        if not result.ok:
            raise RuntimeError(f"benchmark chain refused: {result.error}")
    return len(tokens) / (time.perf_counter() - start)


async def measure(chains: int = CHAINS) -> dict[str, Any]:
    """Best of ``ROUNDS`` for each figure."""
    cold, cached, raw = [], [], []
    for _ in range(ROUNDS):
        tokens, audience = _chains(chains)
        ucan_module._DECODED.clear()
        validator_module._TOKENS.clear()
        verifier = ChainVerifier()
        raw.append(_raw_verifies_per_second(chains * 2))
        cold.append(await _validate_all(tokens, audience, verifier))
        cached.append(await _validate_all(tokens, audience, verifier))
    limit = max(raw) / 2
    return {
        "raw_verifies_per_s": max(raw),
        "limit_per_s": limit,
        "cold_per_s": max(cold),
        "cached_per_s": max(cached),
        "cold_ratio": max(cold) / limit,
    }


def report(result: dict[str, Any]) -> str:
    """Human-readable figures."""
    return (
        f"UCAN validation, 2-link chain ({CHAINS} distinct archives, best of {ROUNDS})\n"
        f"  raw Ed25519 verifies:       {result['raw_verifies_per_s']:8.0f}/s "
        f"-> limit {result['limit_per_s']:.0f} chains/s\n"
        f"  cold validations:           {result['cold_per_s']:8.0f}/s "
        f"= {result['cold_ratio']:.0%} of the limit (target >= 85%)\n"
        f"  cached validations:         {result['cached_per_s']:8.0f}/s (target >= 100,000/s)"
    )


if __name__ == "__main__":
    print(report(asyncio.run(measure())))
