"""``selected_model``: which model a message's ``model`` runs, or the 400 refusing it."""

from __future__ import annotations

from typing import Any

import pytest

from oracle_server._errors import HTTPError
from oracle_server._http.routes.messages import MODEL_UNKNOWN, selected_model

HOSTED = [{"id": "openrouter", "isDefault": True}]
LOCAL = [{"id": "qwen3:32b", "isDefault": True}, {"id": "qwen3:8b", "isDefault": False}]


def test_no_model_runs_the_default() -> None:
    assert selected_model(LOCAL, None) is None
    assert selected_model([], None) is None


def test_a_listed_model_other_than_the_default_is_selected() -> None:
    assert selected_model(LOCAL, "qwen3:8b") == "qwen3:8b"


@pytest.mark.parametrize(
    ("models", "default"), [(LOCAL, "qwen3:32b"), (HOSTED, "openrouter")], ids=["local", "hosted"]
)
def test_the_default_id_runs_the_default_model(models: list[dict[str, Any]], default: str) -> None:
    # The hosted providers list their own name, which is no model id to send upstream.
    assert selected_model(models, default) is None


def test_an_unknown_model_names_the_listed_ids() -> None:
    with pytest.raises(HTTPError) as caught:
        selected_model(LOCAL, "QWEN3:8B")
    body = caught.value.response().body
    assert caught.value.status == 400
    assert caught.value.extra == {"code": MODEL_UNKNOWN}
    assert caught.value.message == (
        "Unknown model 'QWEN3:8B'; use one of: qwen3:32b, qwen3:8b (GET /models), "
        "or send the message without `model` for the default"
    )
    assert b'"code":"message.model_unknown"' in bytes(body)


def test_without_listed_models_any_model_is_refused() -> None:
    with pytest.raises(HTTPError) as caught:
        selected_model([], "qwen3:8b")
    assert caught.value.status == 400
    assert caught.value.extra == {"code": MODEL_UNKNOWN}
    assert "no models configured" in str(caught.value.message)


def test_a_long_unknown_id_is_cut_in_the_message() -> None:
    with pytest.raises(HTTPError) as caught:
        selected_model(LOCAL, "x" * 5000)
    assert len(str(caught.value.message)) < 300


def test_the_listed_default_is_the_model_the_main_agent_runs() -> None:
    from oracle_core import CoreEnv
    from oracle_server._http.routes.system import listed_models

    env = CoreEnv.model_validate(
        {
            "LLM_PROVIDER": "openai-compatible",
            "OPENAI_COMPATIBLE_MODEL": "base",
            "OPENAI_COMPATIBLE_ROLE_MODELS": "subagent=small,main=large",
        }
    )
    assert listed_models(env) == [
        {"id": "large", "isDefault": True},
        {"id": "small", "isDefault": False},
        {"id": "base", "isDefault": False},
    ]
    plain = CoreEnv.model_validate(
        {"LLM_PROVIDER": "openai-compatible", "OPENAI_COMPATIBLE_MODEL": "base"}
    )
    assert listed_models(plain) == [{"id": "base", "isDefault": True}]
