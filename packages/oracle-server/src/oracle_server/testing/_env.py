"""A complete IXO configuration that reaches nothing, for tests of settings and boot."""

from __future__ import annotations

__all__ = ["unreachable_ixo_env"]

# Port 9 (discard) refuses connections: nothing here may be reached.
_UNREACHABLE = "http://127.0.0.1:9"


def unreachable_ixo_env(name: str = "Test") -> dict[str, str]:
    """Every variable ``ORACLE_BACKEND=ixo`` requires, Matrix included, with every URL on
    a port that refuses. ``name`` makes the oracle's name and DIDs."""
    slug = name.lower()
    return {
        "ORACLE_BACKEND": "ixo",
        "ORACLE_NAME": name,
        "ORACLE_DID": f"did:ixo:ixo1{slug}oracle",
        "ORACLE_ENTITY_DID": f"did:ixo:entity:{slug}",
        "ORACLE_SIGNING_MNEMONIC": f"{slug} test signing mnemonic, never used to sign anything",
        "NETWORK": "devnet",
        "BLOCKSYNC_GRAPHQL_URL": f"{_UNREACHABLE}/graphql",
        "SECP_MNEMONIC": "secp mnemonic",
        "RPC_URL": _UNREACHABLE,
        "MATRIX_BASE_URL": _UNREACHABLE,
        "MATRIX_ORACLE_ADMIN_USER_ID": "@oracle:localhost",
        "MATRIX_ORACLE_ADMIN_ACCESS_TOKEN": "token",
        "MATRIX_ORACLE_ADMIN_PASSWORD": "password",
        "MATRIX_RECOVERY_PHRASE": "recovery phrase",
        "MATRIX_ACCOUNT_ROOM_ID": "!account:localhost",
        "MATRIX_VALUE_PIN": "1234",
    }
