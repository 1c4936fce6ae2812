"""``/secrets`` with ``ORACLE_BACKEND=local``: the user sets their secrets over HTTP, a
tool reads them, the prompt names them, and no response or model request ever holds a
value. Bad input gets a stable code and leaves what is stored alone."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from oracle_server import create_oracle_app
from oracle_server.testing import OpenAIDouble, SecretProbePlugin, ToolCalls, auth_headers, serving
from oracle_ucan import Ed25519Signer

VALUE = "sk-local-a1b2c3d4e5"


async def test_secrets_set_over_http_reach_tools_and_never_the_model(tmp_path: Path) -> None:
    probe = SecretProbePlugin()
    steps: list[str | ToolCalls] = [
        ToolCalls([("probe_secrets", {"names": ["OPENAI_KEY"]})]),
        "done",
    ]
    async with OpenAIDouble(steps) as llm:
        app = await create_oracle_app(
            {"name": "Secrets Oracle"},
            plugins=[probe],
            env={"ORACLE_BACKEND": "local", "SQLITE_DATABASE_PATH": str(tmp_path), **llm.env()},
            discover_entry_points=False,
            skip_graceful_shutdown=True,
        )
        alice, bob = Ed25519Signer.generate(), Ed25519Signer.generate()
        async with (
            serving(app) as base_url,
            httpx.AsyncClient(
                base_url=base_url, headers=auth_headers(alice, app.state.oracle_did)
            ) as http,
            httpx.AsyncClient(
                base_url=base_url, headers=auth_headers(bob, app.state.oracle_did)
            ) as other,
        ):
            assert (await http.get("/secrets")).json() == {"secrets": []}
            saved = await http.put("/secrets/OPENAI_KEY", json={"value": VALUE})
            assert saved.status_code == 200, saved.text
            assert saved.json() == {"name": "OPENAI_KEY"}
            listed = (await http.get("/secrets")).json()["secrets"]
            assert [s["name"] for s in listed] == ["OPENAI_KEY"]
            assert VALUE not in json.dumps(listed)
            assert (await other.get("/secrets")).json() == {"secrets": []}

            for name, body, code in [
                ("bad-name", {"value": "v"}, "secrets.bad_name"),
                ("OPENAI_KEY", {"value": ""}, None),
                ("OPENAI_KEY", {"value": "v", "extra": 1}, None),
                ("OPENAI_KEY", {"value": "x" * 16_385}, None),
            ]:
                refused = await http.put(f"/secrets/{name}", json=body)
                assert refused.status_code == 400, refused.text
                if code is not None:
                    assert refused.json()["code"] == code
            assert (await http.delete("/secrets/NOPE")).status_code == 404

            session = (await http.post("/sessions")).json()["sessionId"]
            answer = await http.post(f"/messages/{session}", json={"message": "use my key"})
            assert answer.status_code == 200, answer.text
            assert probe.read == [{"OPENAI_KEY": VALUE}]  # the refused writes changed nothing
            system = str(llm.requests[0].messages[0]["content"])
            assert "- OPENAI_KEY" in system
            assert VALUE not in json.dumps([r.messages for r in llm.requests])

            assert (await http.delete("/secrets/OPENAI_KEY")).json() == {"deleted": True}
            assert (await http.get("/secrets")).json() == {"secrets": []}
    assert VALUE.encode() not in (tmp_path / "user_secrets.db").read_bytes()
