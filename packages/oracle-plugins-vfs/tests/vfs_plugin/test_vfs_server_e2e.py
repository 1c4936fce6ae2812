"""One turn through the real server in ixo mode: the oracle (a ``did:ixo`` with a signing
mnemonic) fetches the user's grant from the UCAN Store double, the model writes a file on
the VFS worker double, then asks to delete it; ``vfs_delete`` waits for the user's
approval and runs only once it is approved through ``POST /approvals/{id}``."""

from __future__ import annotations

from pathlib import Path

from oracle_plugins.vfs import VfsPlugin
from oracle_plugins.vfs.testing import UcanStoreDouble, VfsWorkerDouble
from oracle_server.testing import (
    ChatRequest,
    IxoIdentity,
    LoopbackServer,
    OpenAIDouble,
    Step,
    ToolCalls,
    serving_ixo_oracle,
)
from oracle_ucan import Ed25519Signer

from .conftest import user_delegation

IDENTITY = IxoIdentity("vfs")
ORACLE_DID = IDENTITY.oracle_did


def tool_results(request: ChatRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]


async def test_a_turn_writes_a_file_and_deletes_it_only_once_approved(tmp_path: Path) -> None:
    user = Ed25519Signer.generate()
    worker = VfsWorkerDouble(
        tmp_path / "vfs", trusted_users=[user.did()], verifier=IDENTITY.verifier()
    )
    store = UcanStoreDouble(ORACLE_DID, verifier=IDENTITY.verifier())
    store.grant(user_delegation(user, ORACLE_DID))
    steps: list[Step] = [
        ToolCalls([("vfs_write", {"path": "/notes/draft.md", "content": "# Draft\n"})]),
        ToolCalls([("vfs_delete", {"paths": ["/notes/draft.md"]})]),
        "The draft is in the trash.",
    ]
    async with (
        LoopbackServer(worker.routes) as worker_server,
        LoopbackServer(store.routes) as store_server,
        OpenAIDouble(steps) as llm,
    ):
        worker.origin, store.origin = worker_server.origin, store_server.origin
        env = {"VFS_URL": worker.base_url, "UCAN_STORE_URL": store.base_url, **llm.env()}
        # No grant in the session: the oracle finds the user's grant in the UCAN Store.
        async with serving_ixo_oracle(
            IDENTITY, [VfsPlugin()], data_dir=tmp_path / "data", env=env, user=user
        ) as oracle:
            paused = await oracle.send(
                await oracle.new_session(), "Save a draft note, then delete it"
            )
            assert paused.status_code == 200, paused.text
            [approval] = paused.json()["approvals"]
            # The write ran; the delete waits.
            assert worker.text("/notes/draft.md") == "# Draft\n"
            assert worker.calls_to("/batch/delete") == []
            assert approval["toolName"] == "vfs_delete"
            assert approval["args"] == {"paths": ["/notes/draft.md"]}

            decided = await oracle.http.post(
                f"/approvals/{approval['approvalId']}", json={"decision": "approved"}
            )
            assert decided.status_code == 200, decided.text

    assert decided.json()["message"]["content"] == "The draft is in the trash."
    assert {"vfs_write", "vfs_delete", "vfs_list"} <= set(llm.requests[0].tool_names)
    assert tool_results(llm.requests[1]) == [
        "Wrote /notes/draft.md (8 bytes, text/markdown, version 1)."
    ]
    assert tool_results(llm.requests[-1])[-1] == "Moved to the trash (1): /notes/draft.md."
    assert worker.trashed == ["/notes/draft.md"]
    [deleted] = worker.calls_to("/batch/delete")
    assert (deleted.ability, deleted.user, deleted.status) == ("fs/delete", user.did(), 200)
    assert worker.rejected == []
    assert store.rejected == []
    assert all(c.ok and c.params["audience"] == ORACLE_DID for c in store.calls)
