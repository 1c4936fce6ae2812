"""The UCAN 0.9.1 block as ucanto encodes it: model, DAG-CBOR form, signing and checks."""

from __future__ import annotations

import base64
import binascii
import functools
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import cbor2
from multiformats.cid import CID

from oracle_ucan import dag_cbor, dag_json, varint
from oracle_ucan.cid import DAG_CBOR, RAW, SHA2_256, cid_for
from oracle_ucan.errors import InvalidFormat
from oracle_ucan.principal import (
    EDDSA_SIGNATURE_CODE,
    SIGNATURE_PREFIX,
    Ed25519Verifier,
    decode_principal,
    encode_principal,
)

__all__ = ["UCAN_VERSION", "Signer", "Ucan", "issue"]

UCAN_VERSION = "0.9.1"
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
_UINT64_MAX = (1 << 64) - 1
_REQUIRED_KEYS = frozenset({"v", "iss", "aud", "s", "att", "prf", "exp"})
# Every allowed key set of a UCAN map, and its one canonical order.
_TOP_LEVEL_ORDERS: dict[frozenset[str], tuple[str, ...]] = {
    frozenset(keys): tuple(sorted(keys, key=dag_cbor.sort_key))
    for keys in (
        _REQUIRED_KEYS | frozenset(optional)
        for optional in itertools.chain.from_iterable(
            itertools.combinations(("fct", "nnc", "nbf"), n) for n in range(4)
        )
    )
}
# The canonical orders themselves: a decoded map's key tuple is looked up here directly.
_CANONICAL_ORDERS = frozenset(_TOP_LEVEL_ORDERS.values())
_CBORTag = cbor2.CBORTag
# The only key orders a canonical capability map can have.
_CAPABILITY_ORDERS = frozenset({("can", "with"), ("nb", "can", "with")})


class Signer(Protocol):
    """What issuing needs of a signer."""

    signature_code: int
    signature_algorithm: str

    def did(self) -> str:
        """The DID written as ``iss``."""
        ...

    def sign(self, payload: bytes) -> bytes:
        """The raw signature of ``payload``."""
        ...


_json_str = json.encoder.encode_basestring  # JSON string literal, non-ASCII kept as is


@functools.lru_cache(maxsize=8)
def _encoded_header(version: str) -> bytes:
    """``b64url(header) "."`` for a UCAN version (the same for every UCAN of it)."""
    header = f'{{"alg":"EdDSA","typ":"JWT","ucv":{_json_str(version)}}}'
    return base64.urlsafe_b64encode(header.encode()).rstrip(b"=") + b"."


@dataclass(slots=True, eq=False)
class Ucan:
    """A decoded or freshly issued UCAN block. Treat it as read-only: decoded UCANs are
    shared through a cache (not frozen only because frozen dataclasses are slow to build).

    Attributes:
        version: ``v``, e.g. ``0.9.1``.
        issuer: ``iss`` as a DID.
        audience: ``aud`` as a DID.
        capabilities: ``att``: ``{"with", "can", "nb"?}`` maps.
        expiration: ``exp`` in Unix seconds, ``None`` for never.
        proofs: ``prf`` links.
        signature: The raw signature bytes.
        signature_code: The varsig algorithm code (``0xd0ed`` for EdDSA).
        not_before: ``nbf``, if any.
        nonce: ``nnc``, if any.
        facts: ``fct``.
        block: The DAG-CBOR bytes.
        cid: The block's CID.
    """

    version: str
    issuer: str
    audience: str
    capabilities: tuple[Mapping[str, Any], ...]
    expiration: int | None
    proofs: tuple[CID, ...]
    signature: bytes
    signature_code: int = EDDSA_SIGNATURE_CODE
    not_before: int | None = None
    nonce: str | None = None
    facts: tuple[Mapping[str, Any], ...] = ()
    block: bytes = field(default=b"", repr=False)
    cid: CID | None = None

    def signing_input(self) -> bytes:
        """The bytes the signature covers (UCAN-9): ``b64url(header).b64url(payload)``."""
        return _signing_input(
            self.version,
            self.issuer,
            self.audience,
            self.capabilities,
            self.expiration,
            self.proofs,
            self.not_before,
            self.nonce,
            self.facts,
        )

    def replay_key(self) -> str:
        """The key single use is recorded under: the CID (raw, sha2-256) of the signed bytes.

        Every encoding of one signed UCAN has it: with or without an empty ``nnc``, or
        whatever CID its block was linked by. The block's own CID is not enough, since the
        signature does not cover the block's bytes, only the payload rebuilt from them.
        """
        return str(cid_for(self.signing_input(), RAW))

    def verify_with(self, verifier: Ed25519Verifier) -> bool:
        """Whether ``verifier``'s key signed this UCAN."""
        if self.signature_code != EDDSA_SIGNATURE_CODE:
            return False
        return verifier.verify(self.signature, self.signing_input())

    @classmethod
    def decode(cls, block: bytes, cid: CID | None = None) -> Ucan:
        """Decode a UCAN block (strict DAG-CBOR).

        Decoded blocks are cached by CID: a CID names its bytes, so the same CID always
        decodes to the same UCAN.

        Raises:
            InvalidFormat: not a UCAN 0.9 block.
        """
        if cid is not None:
            cached = _DECODED.get(cid)
            if cached is not None:
                return cached
            if cid.version != 1 or cid.codec != DAG_CBOR or cid.hash.code != SHA2_256:
                # A raw-codec or CIDv0 link to the same bytes would give one UCAN a
                # second name; ucanto links UCAN blocks by their DAG-CBOR CIDv1 only.
                raise InvalidFormat("a UCAN block must be linked by a DAG-CBOR CIDv1 (sha2-256)")
        ucan = _decode_block(bytes(block), cid)
        if cid is not None:
            if len(_DECODED) >= _DECODED_MAX:
                _DECODED.pop(next(iter(_DECODED)))
            _DECODED[cid] = ucan
        return ucan


_DECODED: dict[CID, Ucan] = {}
_DECODED_MAX = 20_000


@functools.lru_cache(maxsize=4096)
def _principal(raw: bytes) -> tuple[str, bool]:
    """The DID of ``iss``/``aud`` bytes, and whether the bytes are its canonical encoding.

    Cached by the bytes themselves: a few issuers and audiences sign most tokens, and the
    round trip through ``encode_principal`` costs as much as the rest of the checks.
    """
    did = decode_principal(raw)
    return did, encode_principal(did) == raw


def _split_signature(sig: bytes) -> tuple[int, bytes]:
    """``(varsig code, raw signature)`` of ``s``: ``varint(code) ‖ varint(len) ‖ bytes``.

    ``_signature`` reads the usual Ed25519 header (``SIGNATURE_PREFIX``) itself.
    """
    code, pos = varint.decode(sig)
    length, pos = varint.decode(sig, pos)
    if len(sig) - pos != length:
        raise InvalidFormat("signature length does not match its header")
    return code, sig[pos:]


def _decode_block(raw: bytes, cid: CID | None) -> Ucan:
    # The checks run in a fixed order, so a block with several faults always gets the
    # same message; the helpers below each check one field.
    data = _top_level_map(dag_cbor.loads_exact(raw))
    version = data["v"]
    if type(version) is not str or (version != UCAN_VERSION and not _VERSION_RE.fullmatch(version)):
        raise InvalidFormat("invalid UCAN version")
    iss, aud, sig = data["iss"], data["aud"], data["s"]
    if type(iss) is not bytes or type(aud) is not bytes or type(sig) is not bytes:
        raise InvalidFormat("iss, aud and s must be bytes")
    signature_code, signature = _signature(sig)
    att = _capabilities(data["att"])
    prf = _proof_links(data["prf"])
    exp, nbf, nnc = data["exp"], data.get("nbf"), data.get("nnc")
    _check_times(exp, nbf)
    if nnc is not None and type(nnc) is not str:
        raise InvalidFormat("nnc must be text")
    facts = _facts(data)
    # Forms ucanto never writes: each would give the same signed payload a second CID.
    if ("fct" in data and not facts) or ("nbf" in data and not nbf):
        raise InvalidFormat("empty fct or zero nbf must be left out")
    for fact in facts:
        dag_cbor.walk(fact, 2)
    issuer, issuer_canonical = _principal(iss)
    audience, audience_canonical = _principal(aud)
    if not (issuer_canonical and audience_canonical):
        raise InvalidFormat("principal is not in its canonical encoding")
    # Positional, in field order: keyword arguments make this call three times slower.
    return Ucan(
        version,
        issuer,
        audience,
        tuple(att),  # capabilities
        exp,  # expiration
        tuple(prf),  # proofs
        signature,
        signature_code,
        nbf,  # not_before
        nnc,  # nonce
        facts,
        raw,  # block
        cid or cid_for(raw),
    )


def _top_level_map(data: Any) -> dict[str, Any]:
    """``data`` if it is a UCAN map with allowed keys in canonical order."""
    if type(data) is not dict:
        raise InvalidFormat("a UCAN block is a map")
    order = tuple(data)
    if order not in _CANONICAL_ORDERS:
        # Every canonical order is text keys only; the message below sorts the keys.
        if not dag_cbor.text_keys(data):
            raise InvalidFormat("DAG-CBOR map keys must be strings")
        if frozenset(order) not in _TOP_LEVEL_ORDERS:
            raise InvalidFormat(f"UCAN block has keys {sorted(order)}")
        raise InvalidFormat("DAG-CBOR map keys are not in canonical order")
    return data


def _signature(sig: bytes) -> tuple[int, bytes]:
    """``(varsig code, raw signature)`` of ``s``, the usual Ed25519 header read inline."""
    if len(sig) == len(SIGNATURE_PREFIX) + 64 and sig.startswith(SIGNATURE_PREFIX):
        return EDDSA_SIGNATURE_CODE, sig[len(SIGNATURE_PREFIX) :]
    return _split_signature(sig)


def _capabilities(att: Any) -> list[dict[str, Any]]:
    """``att`` if it is a list of canonical ``{with, can, nb?}`` maps."""
    if type(att) is not list:
        raise InvalidFormat("att must be a list")
    for capability in att:
        if (
            type(capability) is not dict
            or tuple(capability) not in _CAPABILITY_ORDERS
            or type(capability["with"]) is not str
            or type(capability["can"]) is not str
        ):
            raise InvalidFormat("att must be a list of {with, can, nb?} maps")
        if "nb" in capability:
            nb = capability["nb"]
            if type(nb) is not dict:
                raise InvalidFormat("att must be a list of {with, can, nb?} maps")
            dag_cbor.walk(nb, 2)
    return att


def _proof_links(prf: Any) -> list[CID]:
    """``prf`` with its tag-42 links turned into CIDs, in place."""
    if type(prf) is not list:
        raise InvalidFormat("prf must be a list of links")
    for index, link in enumerate(prf):
        if type(link) is not _CBORTag or link.tag != 42:
            raise InvalidFormat("prf must be a list of links")
        prf[index] = dag_cbor.link(link)
    return prf


def _check_times(exp: Any, nbf: Any) -> None:
    if not (exp is None or type(exp) is int) or not (nbf is None or type(nbf) is int):
        raise InvalidFormat("exp and nbf must be integers (exp may be null)")
    # cbor2 reads bignums (tags 2 and 3) as plain ints and writes them back the same
    # way, so the round trip does not catch them: DAG-CBOR allows 64-bit integers only.
    if (exp is not None and not 0 <= exp <= _UINT64_MAX) or (
        nbf is not None and not 0 <= nbf <= _UINT64_MAX
    ):
        raise InvalidFormat("exp and nbf must be unsigned 64-bit integers")


def _facts(data: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """``fct`` as a tuple of maps, empty when the block has none."""
    if "fct" not in data:
        return ()
    fct = data["fct"]
    if type(fct) is not list or not all(type(f) is dict for f in fct):
        raise InvalidFormat("fct must be a list of maps")
    return tuple(fct)


def _capability_json(capability: Mapping[str, Any]) -> str:
    # Keys in code-unit order: can, nb, with.
    nb = capability.get("nb")
    nb_json = "" if nb is None else ',"nb":' + dag_json.encode(nb)
    return (
        f'{{"can":{_json_str(capability["can"])}{nb_json},"with":{_json_str(capability["with"])}}}'
    )


def signing_input(
    *,
    version: str,
    issuer: str,
    audience: str,
    capabilities: Sequence[Mapping[str, Any]],
    expiration: int | None,
    proofs: Sequence[CID],
    not_before: int | None,
    nonce: str | None,
    facts: Sequence[Mapping[str, Any]],
) -> bytes:
    """``b64url(header) "." b64url(payload)`` of UCAN-9.

    The payload is the compact DAG-JSON of ``att, aud, exp, fct?, iss, nbf?, nnc?, prf``,
    written out directly in that (sorted) key order; caveats and facts go through the
    general DAG-JSON encoder.
    """
    return _signing_input(
        version, issuer, audience, capabilities, expiration, proofs, not_before, nonce, facts
    )


def _signing_input(
    version: str,
    issuer: str,
    audience: str,
    capabilities: Sequence[Mapping[str, Any]],
    expiration: int | None,
    proofs: Sequence[CID],
    not_before: int | None,
    nonce: str | None,
    facts: Sequence[Mapping[str, Any]],
) -> bytes:
    # Positional: built once per signature check, where keyword passing is a real cost.
    att = ",".join(map(_capability_json, capabilities))
    exp = "null" if expiration is None else str(int(expiration))
    fct = f',"fct":{dag_json.encode(list(facts))}' if facts else ""
    nbf = f',"nbf":{int(not_before)}' if not_before else ""
    nnc = f',"nnc":{_json_str(nonce)}' if nonce else ""
    prf = '"' + '","'.join(map(str, proofs)) + '"' if proofs else ""
    payload = (
        f'{{"att":[{att}],"aud":{_json_str(audience)},"exp":{exp}{fct},'
        f'"iss":{_json_str(issuer)}{nbf}{nnc},"prf":[{prf}]}}'
    )
    # base64url without padding: urlsafe_b64encode's work minus its Python wrappers, and
    # replace (a search for two bytes) is cheaper than translate (a per-byte rewrite).
    encoded = binascii.b2a_base64(payload.encode(), newline=False)
    return _encoded_header(version) + encoded.replace(b"+", b"-").replace(b"/", b"_").rstrip(b"=")


def issue(
    signer: Signer,
    *,
    audience: str,
    capabilities: Sequence[Mapping[str, Any]],
    expiration: int | None,
    proofs: Sequence[CID] = (),
    not_before: int | None = None,
    nonce: str | None = None,
    facts: Sequence[Mapping[str, Any]] = (),
    version: str = UCAN_VERSION,
) -> Ucan:
    """Sign a UCAN with ``signer`` and encode its block as ucanto does.

    ``expiration`` has no default: ucanto silently uses 30 seconds when it is omitted.
    """
    caps = tuple(_capability(c) for c in capabilities)
    issuer = signer.did()
    payload = signing_input(
        version=version,
        issuer=issuer,
        audience=audience,
        capabilities=caps,
        expiration=expiration,
        proofs=proofs,
        not_before=not_before,
        nonce=nonce,
        facts=facts,
    )
    raw_signature = signer.sign(payload)
    model: dict[str, Any] = {
        "v": version,
        "iss": encode_principal(issuer),
        "aud": encode_principal(audience),
        "s": SIGNATURE_PREFIX + raw_signature,
        "att": list(caps),
        "prf": list(proofs),
        "exp": expiration,
    }
    if facts:
        model["fct"] = list(facts)
    if nonce is not None:  # ucanto writes an empty nonce too (not in the signed JSON)
        model["nnc"] = nonce
    if not_before:
        model["nbf"] = not_before
    block = dag_cbor.encode(model)
    return Ucan(
        version=version,
        issuer=issuer,
        audience=audience,
        capabilities=caps,
        expiration=expiration,
        proofs=tuple(proofs),
        signature=raw_signature,
        signature_code=signer.signature_code,
        not_before=not_before or None,
        nonce=nonce,
        facts=tuple(facts),
        block=block,
        cid=cid_for(block),
    )


def _capability(value: Mapping[str, Any]) -> dict[str, Any]:
    cap = {"with": value["with"], "can": value["can"]}
    if value.get("nb") is not None:
        cap["nb"] = dict(value["nb"])
    return cap
