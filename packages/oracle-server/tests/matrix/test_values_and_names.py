"""The Matrix layer's pure parts: account-room values, names, message content, settings.

``matrix/values.py`` (SRV-65 cipher, checked against an independent computation with
``cryptography``), ``matrix/rooms.py`` helpers (SRV-67, SRV-69), ``chatlog.message_content``
(SRV-68), ``MatrixError.transient``, and the ``MATRIX_*`` settings (spec §10, SRV-71).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from oracle_core import EnvValidationError
from oracle_server import create_oracle_app
from oracle_server._matrix.chatlog import message_content
from oracle_server._matrix.client import MatrixError
from oracle_server._matrix.rooms import did_from_matrix_user, matrix_user_id, user_room_alias
from oracle_server._matrix.values import ValueDecryptionError, decrypt_value, encrypt_value
from oracle_server._settings import load_settings
from oracle_server.testing import unreachable_ixo_env

MNEMONIC = "abandon ability able about above absent absorb abstract absurd abuse access accident"


def reference_encrypt(plaintext: str, pin: str, iv: bytes) -> str:
    """SRV-65 written out from the spec: AES-256-CBC, PKCS#7, PIN space-padded to 32 bytes."""
    key = pin.encode("utf-8").ljust(32, b" ")
    padder = padding.PKCS7(algorithms.AES.block_size).padder()
    padded = padder.update(plaintext.encode("utf-8")) + padder.finalize()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return iv.hex() + ":" + (encryptor.update(padded) + encryptor.finalize()).hex()


def reference_decrypt(value: str, pin: str) -> str:
    """The inverse of :func:`reference_encrypt`."""
    iv_hex, ct_hex = value.split(":")
    key = pin.encode("utf-8").ljust(32, b" ")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(bytes.fromhex(iv_hex))).decryptor()
    padded = decryptor.update(bytes.fromhex(ct_hex)) + decryptor.finalize()
    unpadder = padding.PKCS7(algorithms.AES.block_size).unpadder()
    return (unpadder.update(padded) + unpadder.finalize()).decode("utf-8")


# --- values.py ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plaintext",
    [MNEMONIC, "ünïcødé — 鍵 🔑", "", "x" * 16, "exactly sixteen!"],
    ids=["mnemonic", "unicode", "empty", "one-block", "block-aligned"],
)
def test_encrypt_then_decrypt_gives_the_text_back(plaintext: str) -> None:
    value = encrypt_value(plaintext, "4321")
    iv_hex, sep, ct_hex = value.partition(":")
    assert sep == ":"
    assert len(bytes.fromhex(iv_hex)) == 16
    assert len(bytes.fromhex(ct_hex)) % 16 == 0
    assert decrypt_value(value, "4321") == plaintext
    # Readable by any implementation of the spec, not only this one.
    assert reference_decrypt(value, "4321") == plaintext


def test_each_encryption_takes_a_fresh_iv() -> None:
    first, second = encrypt_value(MNEMONIC, "4321"), encrypt_value(MNEMONIC, "4321")
    assert first.partition(":")[0] != second.partition(":")[0]
    assert first != second


def test_a_known_vector_matches_an_independent_implementation() -> None:
    iv = bytes(range(16))
    for pin in ("4321", "pïn with ünicode", "p" * 32):
        expected = reference_encrypt(MNEMONIC, pin, iv)
        assert encrypt_value(MNEMONIC, pin, iv=iv) == expected
        assert decrypt_value(expected, pin) == MNEMONIC
    # A value written by another implementation (a fixed text, computed once).
    fixed = reference_encrypt("ünïcødé 🔑", "1234", bytes.fromhex("00" * 15 + "01"))
    assert fixed.startswith("00000000000000000000000000000001:")
    assert decrypt_value(fixed, "1234") == "ünïcødé 🔑"


def test_a_wrong_pin_is_a_decryption_error() -> None:
    value = encrypt_value(MNEMONIC, "4321", iv=bytes(16))
    for wrong in ("1234", "43210", "4321 x"):
        with pytest.raises(ValueDecryptionError, match=r"matrix\.value_decrypt_failed"):
            decrypt_value(value, wrong)


def test_the_pin_is_padded_with_spaces_so_trailing_spaces_do_not_matter() -> None:
    # Documented consequence of space padding (SRV-65): "4321" and "4321 " are one key.
    value = encrypt_value(MNEMONIC, "4321")
    assert decrypt_value(value, "4321 ") == MNEMONIC


@pytest.mark.parametrize(
    "value",
    [
        "",
        "no colon at all",
        "zz:00112233445566778899aabbccddeeff",
        "000102030405060708090a0b0c0d0e0f:not hex",
        "0001:00112233445566778899aabbccddeeff",  # IV too short
        "000102030405060708090a0b0c0d0e0f00:00112233445566778899aabbccddeeff",  # too long
        "000102030405060708090a0b0c0d0e0f:",  # no ciphertext
        "000102030405060708090a0b0c0d0e0f:00112233",  # not whole blocks
        "000102030405060708090a0b0c0d0e0f00112233445566778899aabbccddeeff",  # no separator
    ],
)
def test_malformed_values_are_refused(value: str) -> None:
    with pytest.raises(ValueDecryptionError, match=r"matrix\.bad_value"):
        decrypt_value(value, "4321")


@pytest.mark.parametrize("pin", ["p" * 33, "é" * 17, ""], ids=["33-ascii", "34-utf8", "empty"])
def test_a_pin_outside_1_to_32_bytes_is_refused(pin: str) -> None:
    with pytest.raises(ValueDecryptionError, match=r"matrix\.bad_pin"):
        encrypt_value(MNEMONIC, pin)
    valid = encrypt_value(MNEMONIC, "4321")
    with pytest.raises(ValueDecryptionError, match=r"matrix\.bad_pin"):
        decrypt_value(valid, pin)


def test_a_32_byte_pin_is_accepted() -> None:
    pin = "é" * 16  # 32 bytes in UTF-8, 16 characters
    assert len(pin.encode()) == 32
    assert decrypt_value(encrypt_value(MNEMONIC, pin), pin) == MNEMONIC


def test_errors_never_carry_the_secret() -> None:
    value = encrypt_value(MNEMONIC, "4321")
    with pytest.raises(ValueDecryptionError) as caught:
        decrypt_value(value, "9999")
    text = str(caught.value)
    assert "9999" not in text
    assert "4321" not in text
    assert "abandon" not in text


# --- rooms.py -------------------------------------------------------------------------


def test_an_ixo_did_has_a_matrix_id() -> None:
    assert (
        matrix_user_id("did:ixo:ixo1qz7xk3d0example", "matrix.ixo.world")
        == "@did-ixo-ixo1qz7xk3d0example:matrix.ixo.world"
    )


@pytest.mark.parametrize(
    "did",
    [
        "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
        "did:ixo:IXO1UPPERCASE",
        "did:web:example.com#frag",
        "did:ixo:ixo1 space",
    ],
)
def test_a_did_without_a_valid_localpart_has_no_matrix_id(did: str) -> None:
    assert matrix_user_id(did, "localhost") is None


def test_did_from_matrix_user_round_trips_ixo_users() -> None:
    did = "did:ixo:ixo1qz7xk3d0example"
    user_id = matrix_user_id(did, "localhost")
    assert user_id is not None
    assert did_from_matrix_user(user_id) == did
    assert did_from_matrix_user("@did-ixo-ixo1abc:matrix.example.org") == "did:ixo:ixo1abc"
    # The homeserver part may carry a port.
    assert did_from_matrix_user("@did-ixo-ixo1abc:localhost:8008") == "did:ixo:ixo1abc"


@pytest.mark.parametrize(
    "user_id",
    [
        "@alice:localhost",
        "@did:localhost",
        "@did-:localhost",
        "@did-ixo:localhost",
        "@did-ixo-:localhost",
        "@did--ixo1abc:localhost",
        "@oracle-did-ixo-x:localhost",
    ],
)
def test_other_matrix_users_have_no_did(user_id: str) -> None:
    assert did_from_matrix_user(user_id) is None


def test_user_room_alias_is_exact() -> None:
    assert (
        user_room_alias("did:ixo:ixo1abc", "did:ixo:entity:4f2a", "matrix.ixo.world")
        == "#did-ixo-ixo1abc_did-ixo-entity-4f2a:matrix.ixo.world"
    )


# --- chatlog.message_content ----------------------------------------------------------


def test_a_message_is_markdown_with_its_html() -> None:
    content = message_content("**bold** and `code`")
    assert content == {
        "msgtype": "m.text",
        "body": "**bold** and `code`",
        "format": "org.matrix.custom.html",
        "formatted_body": "<p><strong>bold</strong> and <code>code</code></p>",
    }


def test_a_thread_reply_carries_the_thread_relation() -> None:
    content = message_content("hello", thread_root="$root:localhost")
    assert content["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": "$root:localhost",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$root:localhost"},
    }
    assert content["body"] == "hello"
    assert content["msgtype"] == "m.text"


def test_raw_html_in_markdown_is_escaped() -> None:
    markdown = 'hi <script>alert("x")</script> <img src=x onerror=alert(1)>\n\n<div>block</div>'
    content = message_content(markdown)
    html = content["formatted_body"]
    assert "<script" not in html
    assert "<img" not in html
    assert "<div>" not in html
    assert "&lt;script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;div&gt;block&lt;/div&gt;" in html
    assert content["body"] == markdown  # the plain body keeps what was said


# --- MatrixError.transient ------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "transient"),
    [
        ("network", None, True),
        ("M_LIMIT_EXCEEDED", 429, True),
        ("M_LIMIT_EXCEEDED", None, True),
        ("M_UNKNOWN", 502, True),
        ("M_UNKNOWN", 500, True),
        ("M_UNKNOWN", None, True),
        ("M_UNKNOWN", 400, False),
        ("M_FORBIDDEN", 403, False),
        ("M_NOT_FOUND", 404, False),
        ("M_UNKNOWN_TOKEN", 401, False),
        ("M_ROOM_IN_USE", 400, False),
    ],
)
def test_matrix_errors_say_whether_a_retry_may_help(
    code: str, status: int | None, transient: bool
) -> None:
    error = MatrixError("something failed", code=code, status=status)
    assert error.transient is transient
    assert (error.code, error.status) == (code, status)
    assert str(error) == "something failed"


# --- settings -------------------------------------------------------------------------

IXO_ENV = {k: v for k, v in unreachable_ixo_env("Boot").items() if k != "ORACLE_SIGNING_MNEMONIC"}
MATRIX_ENV = {k: v for k, v in IXO_ENV.items() if k.startswith("MATRIX_")}
BOOLEANS = {
    "MATRIX_ENABLED": "matrix_enabled",
    "MATRIX_CHECKPOINT_SYNC": "matrix_checkpoint_sync",
    "SKIP_LOGGING_CHAT_HISTORY_TO_MATRIX": "skip_logging_chat_history_to_matrix",
}


@pytest.mark.parametrize("variable", list(BOOLEANS))
@pytest.mark.parametrize(("text", "expected"), [("true", True), ("false", False)])
def test_matrix_booleans_read_true_and_false(variable: str, text: str, expected: bool) -> None:
    settings = load_settings({**IXO_ENV, "SQLITE_DATABASE_PATH": "/x", variable: text})
    assert getattr(settings, BOOLEANS[variable]) is expected


@pytest.mark.parametrize("variable", list(BOOLEANS))
@pytest.mark.parametrize("text", ["True", "FALSE", "1", "0", "yes", "no", "on", " true"])
def test_matrix_booleans_refuse_anything_else(variable: str, text: str) -> None:
    with pytest.raises(EnvValidationError) as caught:
        load_settings({**MATRIX_ENV, variable: text})
    assert caught.value.errors == (
        f"[boot-error] Plugin 'server' env validation failed for '{variable}': "
        "Value error, must be exactly 'true' or 'false'",
    )


def test_matrix_boolean_defaults() -> None:
    settings = load_settings(
        {
            **IXO_ENV,
            "SQLITE_DATABASE_PATH": "/x",
            "MATRIX_ENABLED": "",
            "MATRIX_CHECKPOINT_SYNC": "",
        }
    )
    assert settings.matrix_enabled is True
    assert settings.matrix_checkpoint_sync is True
    assert settings.skip_logging_chat_history_to_matrix is False
    assert settings.matrix_active is True


def test_missing_matrix_variables_are_listed_one_line_each() -> None:
    present = {k: v for k, v in IXO_ENV.items() if not k.startswith("MATRIX_")}
    with pytest.raises(EnvValidationError) as caught:
        load_settings({**present, "SQLITE_DATABASE_PATH": "/x", "MATRIX_BASE_URL": "http://hs"})
    missing = [var for var in MATRIX_ENV if var != "MATRIX_BASE_URL"]
    assert sorted(line.split("'")[3] for line in caught.value.errors) == sorted(missing)
    for line in caught.value.errors:
        assert line.startswith("[boot-error] Plugin 'core' env validation failed for 'MATRIX_")
        assert "set MATRIX_ENABLED=false to run without it" in line


@pytest.mark.parametrize(
    "env",
    [
        {"ORACLE_BACKEND": "local"},
        {"ORACLE_BACKEND": "local", "MATRIX_ENABLED": "true"},
        {
            **{k: v for k, v in IXO_ENV.items() if not k.startswith("MATRIX_")},
            "SQLITE_DATABASE_PATH": "/x",
            "MATRIX_ENABLED": "false",
        },
    ],
    ids=["local", "local-with-matrix-enabled", "ixo-matrix-disabled"],
)
def test_without_the_layer_no_matrix_variable_is_needed(env: dict[str, str]) -> None:
    settings = load_settings(env)
    assert settings.matrix_active is False


async def test_a_missing_matrix_variable_fails_boot(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in IXO_ENV.items() if k != "MATRIX_ACCOUNT_ROOM_ID"},
        "SQLITE_DATABASE_PATH": str(tmp_path / "data"),
    }
    with pytest.raises(EnvValidationError) as caught:
        await create_oracle_app({"name": "Boot"}, env=env, discover_entry_points=False)
    assert caught.value.errors == (
        "[boot-error] Plugin 'core' env validation failed for 'MATRIX_ACCOUNT_ROOM_ID': "
        "required when ORACLE_BACKEND=ixo with the Matrix layer on (set MATRIX_ENABLED=false "
        "to run without it, or ORACLE_BACKEND=local to run without Matrix and the chain)",
    )
    assert not (tmp_path / "data").exists()  # it failed before opening anything


async def test_the_local_backend_boots_without_any_matrix_variable(tmp_path: Path) -> None:
    env = {"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(tmp_path / "data")}
    assert not any(key.startswith("MATRIX_") for key in env)
    app = await create_oracle_app(
        {"name": "Local"},
        env=env,
        discover_entry_points=False,
        skip_graceful_shutdown=True,
        require_llm=False,
    )
    try:
        assert app.state.matrix is None
        assert app.state.matrix_state == "disabled"
        assert app.state.ready
    finally:
        await app.aclose()
