"""Secrets kept in the oracle's Matrix account room (SRV-65).

Values are AES-256-CBC with PKCS#7 padding, written ``"<ivHex>:<ciphertextHex>"``; the
key is ``MATRIX_VALUE_PIN`` in UTF-8, right-padded with spaces to 32 bytes.
"""

from __future__ import annotations

import os
import re

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

__all__ = [
    "MNEMONIC_STATE_KEY",
    "SECURE_STATE_TYPE",
    "ValueDecryptionError",
    "decrypt_mnemonic",
    "decrypt_value",
    "encrypt_value",
]

SECURE_STATE_TYPE = "ixo.room.state.secure"
MNEMONIC_STATE_KEY = "encrypted_mnemonic_ed_signing"
# A BIP-39 mnemonic: 12 to 24 lowercase words.
_MNEMONIC = re.compile(r"[a-z]+(?: [a-z]+){11,23}")
_KEY_BYTES = 32
_IV_BYTES = 16


class ValueDecryptionError(ValueError):
    """A stored value could not be decrypted: wrong PIN, or not ``iv:ciphertext`` hex."""


def _pin_key(pin: str) -> bytes:
    raw = pin.encode()
    if not raw or len(raw) > _KEY_BYTES:
        raise ValueDecryptionError("matrix.bad_pin: MATRIX_VALUE_PIN must be 1 to 32 bytes")
    return raw.ljust(_KEY_BYTES, b" ")


def encrypt_value(plaintext: str, pin: str, *, iv: bytes | None = None) -> str:
    """Encrypt ``plaintext`` for the account room (what the provisioning CLI writes)."""
    iv = os.urandom(_IV_BYTES) if iv is None else iv
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext.encode()) + padder.finalize()
    encryptor = Cipher(algorithms.AES(_pin_key(pin)), modes.CBC(iv)).encryptor()
    ciphertext = encryptor.update(padded) + encryptor.finalize()
    return f"{iv.hex()}:{ciphertext.hex()}"


def decrypt_value(value: str, pin: str) -> str:
    """Decrypt an account-room value.

    Raises:
        ValueDecryptionError: malformed value, wrong PIN (bad padding) or non-UTF-8 text.
    """
    iv_hex, sep, ct_hex = value.partition(":")
    try:
        iv, ciphertext = bytes.fromhex(iv_hex), bytes.fromhex(ct_hex)
    except ValueError as exc:
        raise ValueDecryptionError("matrix.bad_value: expected '<ivHex>:<ciphertextHex>'") from exc
    if not sep or len(iv) != _IV_BYTES or not ciphertext or len(ciphertext) % 16:
        raise ValueDecryptionError("matrix.bad_value: expected '<ivHex>:<ciphertextHex>'")
    decryptor = Cipher(algorithms.AES(_pin_key(pin)), modes.CBC(iv)).decryptor()
    padded = decryptor.update(ciphertext) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        plain = unpadder.update(padded) + unpadder.finalize()
        return plain.decode()
    except ValueError as exc:  # bad padding or bad UTF-8: almost always the wrong PIN
        raise ValueDecryptionError(
            "matrix.value_decrypt_failed: the value does not decrypt with MATRIX_VALUE_PIN"
        ) from exc


def decrypt_mnemonic(value: str, pin: str) -> str:
    """Decrypt the account room's signing mnemonic and check it is one.

    CBC has no integrity check: about one wrong PIN in 256 passes the padding check and
    yields garbage, which would become a wrong signing key. A mnemonic is 12 to 24
    lowercase words, which garbage never is.

    Raises:
        ValueDecryptionError: the value does not decrypt to a mnemonic.
    """
    text = decrypt_value(value, pin)
    if _MNEMONIC.fullmatch(" ".join(text.split())) is None:
        raise ValueDecryptionError(
            "matrix.value_decrypt_failed: the value does not decrypt to a mnemonic with "
            "MATRIX_VALUE_PIN"
        )
    return text
