"""What the model and the operator read about the sandbox."""

from __future__ import annotations

from typing import Any

__all__ = ["MANIFEST"]

MANIFEST: dict[str, Any] = {
    "title": "Sandbox",
    "summary": (
        "The user's own Linux workspace: run shell or Python, run skills, keep files, share them."
    ),
    "when_to_use": [
        "Run a skill: sandbox_run with its cid (mounted at /workspace/skills/<name>/)",
        "Read a skill's files: sandbox_run with its cid, cat /workspace/skills/<name>/SKILL.md",
        "Compute, convert or analyse data with code, or call a JSON/REST API",
        "Make a file for the user under /workspace/data/output/, then share a link to it",
        "Save long or quote-heavy text exactly with sandbox_write_file",
        "Reopen an attachment the user sent earlier, under /workspace/output/",
    ],
    "when_not_to_use": [
        "The answer is already in the conversation",
        "Reading a human-readable web page: use the Firecrawl agent",
        "Scratch files with sandbox_write_file (only /workspace/data/)",
    ],
    "examples": [
        {
            "user": "Run the price-forecast skill on my Q3 sales CSV",
            "thought": "A skill run: pass its cid; write the result where the user can fetch it",
            "tool": "sandbox_run",
            "args": {
                "code": "cd /workspace/skills/price-forecast && sh run.sh "
                "/workspace/output/q3.csv > /workspace/data/output/forecast.json",
                "cid": "the cid from list_skills or search_skills",
            },
        },
        {
            "user": "Save this draft so I can pick it up tomorrow",
            "tool": "sandbox_write_file",
            "args": {"path": "/workspace/data/output/draft.md", "content": "# Draft\n..."},
        },
    ],
    "tags": ["sandbox", "code", "execution", "files", "skills"],
    "category": "core",
    "visibility": "always",
    "stability": "stable",
    # The embedded sandbox runs model-written code on this machine: chosen only when
    # SANDBOX_BACKEND=embedded names it or the plugin is forced on, never by local mode.
    "backends": {
        "variable": "SANDBOX_BACKEND",
        "default": "remote",
        "embedded": "embedded",
        "local": False,
    },
}
