"""Compact DAG-JSON (``oracle_ucan.dag_json``): the text UCAN signatures cover (UCAN-9).

Expected strings marked "@ipld/dag-json" were printed by the pinned JavaScript encoder that
ucanto signs with (``@ipld/dag-json`` 10.2.9 under ``@ipld/dag-ucan`` 3.4.5, and 11.0.1).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle_ucan import dag_json
from oracle_ucan.cid import RAW, cid_for
from oracle_ucan.errors import InvalidFormat

BOUNDED = settings(max_examples=200, deadline=None, derandomize=True, database=None)


def test_bytes_are_an_unpadded_standard_base64_slash_object() -> None:
    assert dag_json.encode(b"\xff\xfe") == '{"/":{"bytes":"//4"}}'  # @ipld/dag-json
    assert dag_json.encode(b"") == '{"/":{"bytes":""}}'
    assert dag_json.encode(b"\xfb\xff") == '{"/":{"bytes":"+/8"}}'
    assert dag_json.encode(b"abc") == '{"/":{"bytes":"YWJj"}}'


def test_links_are_a_slash_object_with_the_cid_string() -> None:
    cid = cid_for(b"abc")
    assert (
        dag_json.encode(cid)
        == '{"/":"bafyreif2pall7dybz7vecqka3zo24irdwabwdi4wc55jznaq75q7eaavvu"}'
    )
    assert dag_json.encode([cid_for(b"abc", RAW)]) == (
        '[{"/":"bafkreif2pall7dybz7vecqka3zo24irdwabwdi4wc55jznaq75q7eaavvu"}]'
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (-7, "-7"),
        ((1 << 64) - 1, "18446744073709551615"),
        ("", '""'),
        ([], "[]"),
        ({}, "{}"),
        ((1, "a"), '[1,"a"]'),
        ({"k": None}, '{"k":null}'),
    ],
)
def test_scalars_and_containers(value: object, expected: str) -> None:
    assert dag_json.encode(value) == expected


def test_output_has_no_whitespace() -> None:
    value = {"b": [1, 2, {"c": "d e"}], "a": {"x": None}}
    assert dag_json.encode(value) == '{"a":{"x":null},"b":[1,2,{"c":"d e"}]}'


def test_ascii_keys_sort_by_code_unit_at_every_depth() -> None:
    value = {"b": 1, "a": {"z": 1, "Z": 2, "_": 3}, "B": [{"y": 1, "x": 2}], "aa": 0}
    assert dag_json.encode(value) == '{"B":[{"x":2,"y":1}],"a":{"Z":2,"_":3,"z":1},"aa":0,"b":1}'


def test_keys_sort_by_utf16_code_unit_not_code_point() -> None:
    # U+1F600 is D83D DE00 in UTF-16, which sorts before U+FF61; by code point it is after.
    assert dag_json.encode({"\uff61": 3, "\U0001f600": 2}) == '{"\U0001f600":2,"\uff61":3}'
    assert dag_json.encode({"\ue000": 1, "\U00010000": 2}) == '{"\U00010000":2,"\ue000":1}'


def test_mixed_ascii_and_non_ascii_keys_sort_as_javascript_does() -> None:
    value = {"\U0001f600": 2, "\uff61": 3, "z": 1, "é": 4}
    assert dag_json.encode(value) == '{"z":1,"é":4,"\U0001f600":2,"\uff61":3}'  # @ipld/dag-json
    assert dag_json.encode({"a": 1, "é": 2}) == '{"a":1,"é":2}'  # @ipld/dag-json


def test_strings_escape_as_javascript_does() -> None:
    text = '\x00\x1f"\\/\x7f\u2028\t\n\b\f\r'
    expected = '"\\u0000\\u001f\\"\\\\/\x7f\u2028\\t\\n\\b\\f\\r"'  # @ipld/dag-json
    assert dag_json.encode(text) == expected
    assert dag_json.encode("é\U0001f600").encode() == bytes.fromhex("22c3a9f09f988022")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.5, "1.5"),
        (2.0, "2"),
        (-0.0, "0"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e21, "1e+21"),
        (1e300, "1e+300"),
        (5e-324, "5e-324"),
        (1e-7, "1e-7"),
        (-2.5e-8, "-2.5e-8"),
        (0.00001, "0.00001"),
        (1.5e-5, "0.000015"),
        (1e16, "10000000000000000.0"),
        (1.23e20, "123000000000000000000.0"),
    ],
)
def test_floats_print_as_javascript_does(value: float, expected: str) -> None:
    """Every expected string is @ipld/dag-json's output for the same number."""
    assert dag_json.encode(value) == expected


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, {"a": [math.nan]}])
def test_nan_and_infinities_are_refused(value: object) -> None:
    with pytest.raises(InvalidFormat, match="NaN and infinities"):
        dag_json.encode(value)


@pytest.mark.parametrize("value", [{1, 2}, object(), bytearray(b"x"), {"a": frozenset()}])
def test_unsupported_types_are_refused(value: object) -> None:
    with pytest.raises(InvalidFormat, match="cannot encode"):
        dag_json.encode(value)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 53), 1 << 53) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


def utf16_units(key: str) -> list[int]:
    raw = key.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]


def keys_in_code_unit_order(value: Any) -> bool:
    if isinstance(value, dict):
        keys = list(value)
        return keys == sorted(keys, key=utf16_units) and all(
            keys_in_code_unit_order(item) for item in value.values()
        )
    if isinstance(value, list):
        return all(keys_in_code_unit_order(item) for item in value)
    return True


@BOUNDED
@given(value=JSON_VALUES)
def test_output_is_compact_json_with_keys_in_code_unit_order(value: Any) -> None:
    text = dag_json.encode(value)
    parsed = json.loads(text)
    assert parsed == value
    assert keys_in_code_unit_order(parsed)
    assert text == json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))
