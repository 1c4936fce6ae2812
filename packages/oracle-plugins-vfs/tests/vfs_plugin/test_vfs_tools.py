"""Every tool over the VFS worker double, through the remote backend and two-hop UCAN."""

from __future__ import annotations

from oracle_plugins.vfs.testing import UcanStoreDouble, VfsWorkerDouble

from .conftest import RuntimeFactory, call


async def test_list_glob_and_read_show_the_users_files(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.put("/notes/plan.md", "".join(f"line {n}\n" for n in range(1, 8)))
    worker.put("/notes/old/draft.md", "draft\n")
    worker.put("/report.pdf", b"%PDF-1.4", "application/pdf")
    async with vfs_runtime(config={"VFS_MAX_READ_LINES": "3"}) as rt:
        root = await call(rt, "vfs_list")
        notes = await call(rt, "vfs_list", {"path": "/notes"})
        markdown = await call(rt, "vfs_glob", {"pattern": "/notes/*.md"})
        anywhere = await call(rt, "vfs_glob", {"pattern": "**/*.md"})
        first = await call(rt, "vfs_read", {"path": "/notes/plan.md"})
        later = await call(rt, "vfs_read", {"path": "/notes/plan.md", "offset": 6, "limit": 50})
        none = await call(rt, "vfs_glob", {"pattern": "*.xlsx"})
    assert root.splitlines() == ["/notes/", "/report.pdf"]
    assert notes.splitlines() == ["/notes/old/", "/notes/plan.md"]
    assert markdown.splitlines() == ["/notes/plan.md"]
    assert anywhere.splitlines() == ["/notes/old/draft.md", "/notes/plan.md"]
    # min(limit, VFS_MAX_READ_LINES, 5000) lines, numbered, with where to go on.
    assert first.splitlines() == [
        "/notes/plan.md (lines 1-3 of 7):",
        "     1\tline 1",
        "     2\tline 2",
        "     3\tline 3",
        "[4 more lines: call vfs_read with offset=4]",
    ]
    assert later.splitlines() == [
        "/notes/plan.md (lines 6-7 of 7):",
        "     6\tline 6",
        "     7\tline 7",
    ]
    assert none == "No files match *.xlsx."
    [read, *_] = worker.calls_to("/files/{id}/read")
    assert read.params == {"offset": "1", "limit": "3"}


async def test_search_and_grep_cite_lines_and_say_when_only_words_matched(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.put("/notes/budget.md", "# Plans\nThe budget is 40k.\nReview the Budget in May.\n")
    worker.put("/other/todo.md", "nothing here\n")
    async with vfs_runtime() as rt:
        lexical = await call(rt, "vfs_search", {"q": "budget"})
        worker.semantic = True
        semantic = await call(rt, "vfs_search", {"q": "budget", "path": "/notes"})
        grep = await call(rt, "vfs_grep", {"q": "Budget", "path": "/notes"})
        nothing = await call(rt, "vfs_grep", {"q": "absent"})
    assert lexical.splitlines() == [
        "- /notes/budget.md (L2, L3): The budget is 40k.",
        "(Only word matches: semantic search did not answer.)",
    ]
    assert "Only word matches" not in semantic
    assert grep == "/notes/budget.md:3: Review the Budget in May."
    assert nothing == "No line holds 'absent' under /."
    assert [c.params for c in worker.calls_to("/search")] == [
        {"q": "budget", "path": "/"},
        {"q": "budget", "path": "/notes"},
    ]


async def test_write_refuses_an_existing_file_until_overwrite(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    async with vfs_runtime() as rt:
        created = await call(rt, "vfs_write", {"path": "/notes/a.md", "content": "one"})
        again = await call(rt, "vfs_write", {"path": "/notes/a.md", "content": "two"})
        assert worker.text("/notes/a.md") == "one"
        replaced = await call(
            rt, "vfs_write", {"path": "/notes/a.md", "content": "two", "overwrite": True}
        )
        typed = await call(
            rt, "vfs_write", {"path": "/data.bin", "content": "x", "mimeType": "application/x-y"}
        )
    assert created == "Wrote /notes/a.md (3 bytes, text/markdown, version 1)."
    assert "already exists" in again
    assert "Ask the user before overwriting" in again
    assert replaced == "Wrote /notes/a.md (3 bytes, text/markdown, version 2)."
    assert worker.text("/notes/a.md") == "two"
    assert "application/x-y" in typed
    assert [(c.method, c.route, c.status) for c in worker.calls if c.route != "/tree"] == [
        ("POST", "/files", 201),
        ("POST", "/files", 409),
        ("POST", "/files", 409),
        ("PUT", "/files/{id}", 200),
        ("POST", "/files", 201),
    ]


async def test_edit_replaces_exact_text(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.put("/a.txt", "red green red\n")
    async with vfs_runtime() as rt:
        ambiguous = await call(
            rt, "vfs_edit", {"path": "/a.txt", "oldString": "red", "newString": "x"}
        )
        missing = await call(
            rt, "vfs_edit", {"path": "/a.txt", "oldString": "blue", "newString": "x"}
        )
        one = await call(rt, "vfs_edit", {"path": "/a.txt", "oldString": "green", "newString": "G"})
        every = await call(
            rt,
            "vfs_edit",
            {"path": "/a.txt", "oldString": "red", "newString": "R", "replaceAll": True},
        )
    assert "more than once" in ambiguous
    assert "replaceAll=true" in ambiguous
    assert "does not occur in /a.txt" in missing
    assert one == "Edited /a.txt: 1 replacement."
    assert every == "Edited /a.txt: 2 replacements."
    assert worker.text("/a.txt") == "R G R\n"


async def test_move_renames_files_and_folders_and_names_a_taken_destination(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.put("/a.txt", "a")
    worker.put("/b.txt", "b")
    worker.put("/docs/x.md", "x")
    async with vfs_runtime() as rt:
        moved = await call(rt, "vfs_move", {"from": "/a.txt", "to": "/archive/a.txt"})
        folder = await call(rt, "vfs_move", {"from": "/docs", "to": "/papers"})
        taken = await call(rt, "vfs_move", {"from": "/b.txt", "to": "/archive/a.txt"})
        gone = await call(rt, "vfs_move", {"from": "/nope.txt", "to": "/x.txt"})
    assert moved == "Moved /a.txt to /archive/a.txt."
    assert folder == "Moved /docs to /papers."
    assert worker.text("/papers/x.md") == "x"
    assert taken.startswith("The destination /archive/a.txt is taken")
    assert gone.startswith("/nope.txt was not found")
    assert worker.text("/b.txt") == "b"


async def test_delete_trashes_and_reports_what_was_missing(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    worker.put("/a.txt", "a")
    worker.put("/notes/b.txt", "b")
    async with vfs_runtime() as rt:
        answer = await call(
            rt, "vfs_delete", {"paths": ["/a.txt", "/notes/b.txt", "/nope.txt", "/gone/c.txt"]}
        )
        tools = await rt.toolset()
    assert answer == (
        "Moved to the trash (2): /a.txt, /notes/b.txt. "
        "Not found, skipped (2): /nope.txt, /gone/c.txt."
    )
    assert worker.trashed == ["/a.txt", "/notes/b.txt"]
    [batch] = worker.calls_to("/batch/delete")
    assert batch.ability == "fs/delete"
    effects = {name: t.effect for name, t in tools.tools.items() if name.startswith("vfs_")}
    assert effects == {
        "vfs_search": "read",
        "vfs_grep": "read",
        "vfs_glob": "read",
        "vfs_list": "read",
        "vfs_read": "read",
        "vfs_write": "write",
        "vfs_edit": "write",
        "vfs_move": "write",
        "vfs_delete": "destructive",
        "vfs_share": "write",
    }


async def test_share_publishes_and_unpublishes_files_and_folders(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble
) -> None:
    file_id = worker.put("/docs/cv.pdf", b"%PDF", "application/pdf")
    async with vfs_runtime() as rt:
        shared = await call(rt, "vfs_share", {"path": "/docs/cv.pdf"})
        folder = await call(rt, "vfs_share", {"path": "/docs"})
        hidden = await call(rt, "vfs_share", {"path": "/docs/cv.pdf", "public": False})
    link = f"{worker.base_url}/public/{file_id}"
    assert shared == f"/docs/cv.pdf is public: {link} (anyone with the link can open it)."
    assert folder.startswith("/docs is public: ")
    assert hidden == "/docs/cv.pdf is no longer public."
    assert [c.params for c in worker.calls_to("/files/{id}/public")] == [
        {"public": "true"},
        {"public": "false"},
    ]
    assert [c.params for c in worker.calls_to("/folders/public")] == [
        {"path": "/docs", "public": "true"}
    ]


async def test_tool_inputs_are_bounded_as_the_spec_says(vfs_runtime: RuntimeFactory) -> None:
    async with vfs_runtime() as rt:
        tools = (await rt.toolset()).tools
    search = tools["vfs_search"].input_schema
    assert (search["properties"]["q"]["minLength"], search["properties"]["q"]["maxLength"]) == (
        1,
        512,
    )
    delete = tools["vfs_delete"].input_schema
    assert (
        delete["properties"]["paths"]["minItems"],
        delete["properties"]["paths"]["maxItems"],
    ) == (1, 1000)
    move = tools["vfs_move"].input_schema
    assert set(move["properties"]) == {"from", "to"}
    write = tools["vfs_write"].input_schema
    assert set(write["properties"]) == {"path", "content", "mimeType", "overwrite"}
    edit = tools["vfs_edit"].input_schema
    assert set(edit["properties"]) == {"path", "oldString", "newString", "replaceAll"}
    assert edit["properties"]["oldString"]["minLength"] == 1
    share = tools["vfs_share"].input_schema
    assert share["properties"]["public"]["default"] is True
    read = tools["vfs_read"].input_schema
    assert set(read["properties"]) == {"path", "offset", "limit"}


async def test_the_read_window_never_exceeds_5000_lines(
    vfs_runtime: RuntimeFactory, worker: VfsWorkerDouble, store: UcanStoreDouble
) -> None:
    worker.put("/big.txt", "x\n" * 6000)
    async with vfs_runtime(config={"VFS_MAX_READ_LINES": "9000"}) as rt:
        answer = await call(rt, "vfs_read", {"path": "/big.txt", "limit": 8000})
    assert answer.splitlines()[0] == "/big.txt (lines 1-5000 of 6000):"
    assert answer.splitlines()[-1] == "[1000 more lines: call vfs_read with offset=5001]"
    assert worker.calls_to("/files/{id}/read")[0].params["limit"] == "5000"
