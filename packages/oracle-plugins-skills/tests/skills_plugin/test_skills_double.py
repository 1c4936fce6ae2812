"""The registry double: content-addressed capsule archives and the download route a
sandbox mounts skills from."""

from __future__ import annotations

import httpx
import pytest

from oracle_plugins.skills import archive_cid
from oracle_plugins.skills.testing import (
    OTHER_USER_DID,
    SkillsRegistryDouble,
    capsule,
    read_archive,
)
from oracle_ucan import cid_for

from .conftest import MinterFactory

RAW_CODEC = 0x55


def test_archive_cid_is_cidv1_raw_sha256_base32() -> None:
    assert archive_cid(b"hello world") == (
        "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e"
    )
    assert archive_cid(b"") == str(cid_for(b"", RAW_CODEC))


def test_a_capsule_is_a_deterministic_gzip_tar_under_its_name() -> None:
    files: dict[str, str | bytes] = {
        "scripts/run.py": "print('hi')\n",
        "data/table.bin": b"\x00\x01",
    }
    built = capsule("report-maker", files, description="Makes reports.")
    assert read_archive(built.archive) == {
        "report-maker/SKILL.md": (
            b"---\nname: report-maker\ndescription: Makes reports.\n---\n\n"
            b"# report-maker\n\nMakes reports.\n"
        ),
        "report-maker/data/table.bin": b"\x00\x01",
        "report-maker/scripts/run.py": b"print('hi')\n",
    }
    assert built.archive[:2] == b"\x1f\x8b"  # gzip
    assert built.cid == str(cid_for(built.archive, RAW_CODEC))
    assert built.cid.startswith("bafkrei")
    again = capsule(
        "report-maker", dict(reversed(list(files.items()))), description="Makes reports."
    )
    assert again.cid == built.cid
    assert capsule("report-maker", {"SKILL.md": "# custom\n"}).files == {"SKILL.md": b"# custom\n"}
    assert capsule("report-maker", files, description="Other.").cid != built.cid


@pytest.mark.parametrize("name", ["Report", "report maker", "-report", "a" * 65, "re/port"])
def test_capsule_names_are_lower_case_words(name: str) -> None:
    with pytest.raises(ValueError, match="capsule name"):
        capsule(name)


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "a//b", "", "a\\b"])
def test_capsule_files_stay_inside_the_skill_folder(path: str) -> None:
    with pytest.raises(ValueError, match="must be relative"):
        capsule("safe", {path: "x"})


def test_capsule_instants_must_be_iso_8601() -> None:
    with pytest.raises(ValueError, match="must be an ISO 8601 instant"):
        capsule("safe", created_at="yesterday")


async def test_downloads_serve_public_archives_and_private_ones_to_their_owner(
    registry: SkillsRegistryDouble, make_minter: MinterFactory
) -> None:
    public = next(c for c in registry.catalog if c.name == "kyc-check")
    mine = next(c for c in registry.catalog if c.name == "meeting-notes")
    theirs = next(c for c in registry.catalog if c.private_owner == OTHER_USER_DID)
    token = await make_minter().mint_invocation(registry.did, "ixo:skills", can="skills/*")
    assert token is not None
    bearer = {"Authorization": f"Bearer {token}", "X-Auth-Type": "ucan"}
    async with httpx.AsyncClient(base_url=registry.base_url) as http:
        anonymous = await http.get(f"/capsules/{public.cid}/download")
        locked = await http.get(f"/capsules/{mine.cid}/download")
        owned = await http.get(f"/capsules/{mine.cid}/download", headers=bearer)
        foreign = await http.get(f"/capsules/{theirs.cid}/download", headers=bearer)
        unknown = await http.get("/capsules/bafkreiunknown/download", headers=bearer)
        forged = await http.get(
            f"/capsules/{mine.cid}/download",
            headers={"Authorization": "Bearer nope", "X-Auth-Type": "ucan"},
        )
    assert (anonymous.status_code, anonymous.headers["content-type"]) == (200, "application/gzip")
    assert anonymous.content == public.archive
    assert archive_cid(anonymous.content) == public.cid
    assert locked.status_code == 401
    assert owned.status_code == 200
    assert set(read_archive(owned.content)) == {
        "meeting-notes/SKILL.md",
        "meeting-notes/scripts/run.py",
    }
    assert (foreign.status_code, unknown.status_code, forged.status_code) == (404, 404, 401)
    assert [cid for cid, _ in registry.downloads] == [public.cid, mine.cid]
    assert registry.archive_url(public.cid) == f"{registry.base_url}/capsules/{public.cid}/download"


async def test_anonymous_listings_hold_public_rows_without_visibility(
    registry: SkillsRegistryDouble,
) -> None:
    async with httpx.AsyncClient(base_url=registry.base_url) as http:
        listed = (await http.get("/capsules", params={"limit": 100})).json()
        bad = await http.get("/capsules/search", params={"q": " ", "limit": 5})
        too_many = await http.get("/capsules", params={"limit": 101})
    assert {c["name"] for c in listed["capsules"]} == {"invoice-builder", "slide-deck", "kyc-check"}
    assert all("visibility" not in c for c in listed["capsules"])
    assert listed["pagination"] == {"total": 4, "limit": 100, "offset": 0, "hasMore": False}
    assert (bad.status_code, too_many.status_code) == (400, 400)
