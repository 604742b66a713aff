"""Skills on disk: parsing and its rules, the sources and their order, the limits, the
stat-based refresh, the catalog's order and cap, bundled files kept inside their folder, and
the gate's rules for skills. Real files in temporary folders throughout."""

import os
from pathlib import Path

import pytest

from tether.daemon.logs import log
from tether.daemon.skills.catalog import CATALOG_MAX, catalog, glob_matches
from tether.daemon.skills.library import MAX_SKILLS, SkillLibrary, protected_folders
from tether.daemon.skills.parse import (
    BODY_MAX,
    DESCRIPTION_MAX,
    FILE_MAX,
    SkillProblem,
    parse_skill,
)
from tether.daemon.skills.resources import ResourceRefused, resolve_resource
from tether.daemon.skills.trust import SkillsTrust
from tether.daemon.turn.permissions import CallFacts, PermissionPolicy
from tether.daemon.workspace_trust import TrustRecord, WorkspaceTrust


def write_skill(
    folder: Path,
    name: str,
    description: str = "Does a thing.",
    body: str = "Do the thing.",
    *,
    extra: str = "",
    folder_name: str | None = None,
) -> Path:
    skill = folder / (folder_name or name)
    skill.mkdir(parents=True, exist_ok=True)
    file = skill / "SKILL.md"
    file.write_text(f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n")
    return file


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    workspace = tmp_path / "project"
    workspace.mkdir()
    return workspace, tmp_path / "config" / "skills"


# --- one file ----------------------------------------------------------------------------


def test_a_skill_file_gives_its_front_matter_and_body() -> None:
    text = (
        "---\nname: pdf-forms\ndescription: >\n  Fill PDF forms\n  with pdftk.\n"
        "paths: ['**/*.pdf']\nautoAttach: forms/\nlicense: MIT\nallowed-tools: [bash]\n"
        "---\n# Filling forms\nUse pdftk.\n"
    )
    front, body = parse_skill(text.encode())
    assert front.name == "pdf-forms"
    assert front.description == "Fill PDF forms with pdftk."
    assert front.globs == ("**/*.pdf", "forms/")
    assert body == "# Filling forms\nUse pdftk."


def test_a_bom_and_crlf_lines_are_read() -> None:
    front, body = parse_skill(b"\xef\xbb\xbf---\r\nname: a\r\ndescription: d\r\n---\r\nbody\r\n")
    assert (front.name, body) == ("a", "body")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("no front matter\n", "does not start with a front matter block"),
        ("---\nname: a\ndescription: d\n", "not closed"),
        ("---\nname: a\n  bad: x\ndescription: d\n---\n", "not valid YAML (line 3)"),
        ("---\n- a\n- b\n---\n", "not a set of `key: value` lines"),
        ("---\ndescription: d\n---\n", "has no `name`"),
        ("---\nname: Has_Caps\ndescription: d\n---\n", "not lowercase kebab-case"),
        ("---\nname: a--b\ndescription: d\n---\n", "not lowercase kebab-case"),
        ("---\nname: -a\ndescription: d\n---\n", "not lowercase kebab-case"),
        (f"---\nname: {'a' * 65}\ndescription: d\n---\n", "65 characters long (at most 64)"),
        ("---\nname: a\n---\n", "has no `description`"),
        ("---\nname: a\ndescription: '  '\n---\n", "has no `description`"),
        (
            f"---\nname: a\ndescription: {'d' * (DESCRIPTION_MAX + 1)}\n---\n",
            "241 characters long (at most 240)",
        ),
        ("---\nname: a\ndescription: d\npaths: {x: 1}\n---\n", "`paths` must be a glob"),
        ("---\nname: a\ndescription: d\nautoAttach: [1]\n---\n", "`autoAttach` must be a"),
        ("---\nname: !!python/object:os.system a\ndescription: d\n---\n", "not valid YAML"),
    ],
)
def test_a_file_that_breaks_a_rule_says_why(text: str, why: str) -> None:
    with pytest.raises(SkillProblem) as caught:
        parse_skill(text.encode())
    assert why in str(caught.value)


def test_the_longest_name_and_description_are_allowed() -> None:
    name = "a" * 64
    front, _ = parse_skill(f"---\nname: {name}\ndescription: {'d' * 240}\n---\n".encode())
    assert front.name == name


def test_a_file_over_256_kb_is_refused_and_not_utf8_is_refused() -> None:
    big = b"---\nname: a\ndescription: d\n---\n" + b"x" * FILE_MAX
    with pytest.raises(SkillProblem, match="at most 262,144"):
        parse_skill(big)
    with pytest.raises(SkillProblem, match="not UTF-8"):
        parse_skill(b"---\nname: a\ndescription: \xff\n---\n")


# --- the library -------------------------------------------------------------------------


def test_sources_are_read_in_order_and_a_later_one_wins(places: tuple[Path, Path]) -> None:
    workspace, user = places
    for folder in (user, *(workspace / f for f in (".claude/skills", ".agents/skills"))):
        write_skill(folder, "shared", f"from {folder.parent.name}")
    write_skill(user, "mine", "only the user's")
    write_skill(workspace / ".claude/skills", "claude-only", "only claude's")
    library = SkillLibrary(workspace, user)
    found = library.refresh()
    assert [s.name for s in found.skills] == ["claude-only", "mine", "shared"]
    shared = found.get("shared")
    assert shared is not None
    assert (shared.description, shared.origin, shared.source) == (
        "from .agents",
        "workspace",
        ".agents/skills",
    )
    assert any("overrides" in w and ".claude" in w for w in shared.warnings)
    write_skill(workspace / ".tether/skills", "shared", "tether's own")
    assert library.refresh().get("shared").description == "tether's own"  # type: ignore[union-attr]
    mine = library.current.get("mine")
    assert mine is not None
    assert mine.origin == "user"
    assert mine.source.endswith("skills")


def test_invalid_skills_are_reported_never_listed(places: tuple[Path, Path]) -> None:
    workspace, user = places
    folder = workspace / ".tether/skills"
    write_skill(folder, "good")
    write_skill(folder, "Bad_Name")
    (folder / "no-skill-here").mkdir()
    (folder / "huge").mkdir()
    (folder / "huge/SKILL.md").write_bytes(
        b"---\nname: huge\ndescription: d\n---\n" + b"x" * FILE_MAX
    )
    library = SkillLibrary(workspace, user)
    with log.capture() as records:
        found = library.refresh()
        library.refresh()
    assert [s.name for s in found.skills] == ["good"]
    reasons = {p.file.parent.name: p.reason for p in found.invalid}
    assert set(reasons) == {"Bad_Name", "huge"}
    assert "kebab-case" in reasons["Bad_Name"]
    assert "262,144" in reasons["huge"]
    logged = [r for r in records if r["msg"] == "skill ignored"]
    assert len(logged) == 2  # once each, not at every refresh


def test_two_folders_of_one_source_with_one_name_keep_the_first(
    places: tuple[Path, Path],
) -> None:
    workspace, user = places
    folder = workspace / ".tether/skills"
    write_skill(folder, "dup", "first", folder_name="a-dup")
    write_skill(folder, "dup", "second", folder_name="b-dup")
    found = SkillLibrary(workspace, user).refresh()
    assert found.get("dup").description == "first"  # type: ignore[union-attr]
    assert "taken by a-dup/" in found.invalid[0].reason
    assert "folder is named 'a-dup'" in found.get("dup").warnings[0]  # type: ignore[union-attr]


def test_at_most_64_skills_the_rest_reported(places: tuple[Path, Path]) -> None:
    workspace, user = places
    for index in range(MAX_SKILLS + 2):
        write_skill(user, f"skill-{index:03}")
    found = SkillLibrary(workspace, user).refresh()
    assert len(found.skills) == MAX_SKILLS
    assert [p.file.parent.name for p in found.invalid] == ["skill-064", "skill-065"]
    assert "more than 64" in found.invalid[0].reason


def test_a_workspace_skill_that_leads_out_of_the_workspace_is_refused(
    places: tuple[Path, Path], tmp_path: Path
) -> None:
    workspace, user = places
    outside = tmp_path / "elsewhere"
    write_skill(outside, "escaper")
    (workspace / ".tether/skills").mkdir(parents=True)
    (workspace / ".tether/skills/escaper").symlink_to(outside / "escaper")
    found = SkillLibrary(workspace, user).refresh()
    assert not found.skills
    assert "leads out of the workspace" in found.invalid[0].reason
    # The user's own folder may link anywhere.
    user.mkdir(parents=True)
    (user / "escaper").symlink_to(outside / "escaper")
    assert SkillLibrary(workspace, user).refresh().get("escaper") is not None


def test_refresh_parses_again_only_what_changed(places: tuple[Path, Path]) -> None:
    workspace, user = places
    file = write_skill(user, "one", "first")
    library = SkillLibrary(workspace, user)
    first = library.refresh()
    assert library.refresh() is first  # nothing changed: the very same set
    file.write_text("---\nname: one\ndescription: second version\n---\nnew body\n")
    stat = file.stat()
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    second = library.refresh()
    assert second is not first
    assert second.get("one").description == "second version"  # type: ignore[union-attr]
    file.unlink()
    assert not library.refresh()


def test_a_long_body_is_middle_truncated(places: tuple[Path, Path]) -> None:
    workspace, user = places
    write_skill(user, "long", body="HEAD" + "x" * 20_000 + "TAIL")
    skill = SkillLibrary(workspace, user).refresh().get("long")
    assert skill is not None
    assert len(skill.body) <= BODY_MAX
    assert skill.body.startswith("HEAD")
    assert skill.body.endswith("TAIL")
    assert "characters cut here" in skill.body
    assert skill.body_chars == 20_008


def test_the_skill_folders_are_protected_and_the_users_when_inside(
    places: tuple[Path, Path],
) -> None:
    workspace, user = places
    assert protected_folders(workspace, user) == (
        ".claude/skills",
        ".agents/skills",
        ".tether/skills",
    )
    inside = workspace / "home/.config/tether/skills"
    inside.mkdir(parents=True)
    assert protected_folders(workspace, inside)[-1] == "home/.config/tether/skills"


# --- trust ---------------------------------------------------------------------------------


def test_trust_is_remembered_in_its_file(tmp_path: Path) -> None:
    path = tmp_path / "state/skills-trust.json"
    assert not SkillsTrust(path).trusted
    SkillsTrust(path).grant("cli")
    assert SkillsTrust(path).trusted
    assert path.stat().st_mode & 0o777 == 0o600
    path.write_text("{not json")
    assert not SkillsTrust(path).trusted  # a damaged record asks again


def test_trusting_the_workspace_trusts_its_skills_and_a_revoke_withdraws_both(
    tmp_path: Path,
) -> None:
    """The skills consult the workspace's trust; revoking it also withdraws the skills' own
    yes, given at a first use before the workspace was trusted."""
    record = TrustRecord(tmp_path / "state/workspace-trust.json")
    skills = SkillsTrust(tmp_path / "state/skills-trust.json", record)
    changes: list[bool] = []
    trust = WorkspaceTrust(
        record, also_revoke=[skills.revoke], on_change=[lambda: changes.append(record.trusted)]
    )
    skills.grant("cli")  # the question at a skill's first use
    trust.write(True, "cli")
    trust.changed()
    assert skills.trusted
    trust.write(False, "cli")
    trust.changed()
    assert not skills.trusted
    assert not SkillsTrust(tmp_path / "state/skills-trust.json").trusted  # remembered
    assert not TrustRecord(tmp_path / "state/workspace-trust.json").trusted
    assert changes == [True, False]
    trust.write(True, "vscode")
    assert SkillsTrust(tmp_path / "state/skills-trust.json", record).trusted
    assert (record.by, record.trusted) == ("vscode", True)


# --- the catalog ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("glob", "path", "matched"),
    [
        ("*.py", "src/a.py", True),
        ("*.py", "a.py", True),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/sub/a.py", False),
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "src/x/y/a.py", True),
        ("**/*.tsx", "web/app/x.tsx", True),
        ("docs/", "docs/guide/intro.md", True),
        ("docs/", "src/docs.md", False),
        ("*.[ch]", "lib/x.h", True),
        ("*.[!ch]", "lib/x.h", False),
        ("./src/?.py", "src/a.py", True),
    ],
)
def test_globs_match_workspace_paths(glob: str, path: str, matched: bool) -> None:
    assert glob_matches(glob, path) is matched


def test_the_catalog_lists_matching_skills_first_and_at_most_12(
    places: tuple[Path, Path],
) -> None:
    workspace, user = places
    for index in range(15):
        write_skill(user, f"s{index:02}", f"skill number {index}")
    write_skill(user, "zz-python", "Python style.", extra="paths: '**/*.py'\n")
    write_skill(workspace / ".tether/skills", "zz-docs", "Docs.", extra="autoAttach: [docs/]\n")
    skills = SkillLibrary(workspace, user).refresh().skills
    text = catalog(skills, ["src/app.py", "docs/index.md"])
    lines = text.splitlines()
    entries = [line for line in lines if line.startswith("- ")]
    assert len(entries) == CATALOG_MAX
    assert entries[0] == "- zz-docs (repository): Docs."
    assert entries[1] == "- zz-python: Python style."
    assert entries[2] == "- s00: skill number 0"
    assert lines[-1].startswith("5 more available: call skill with a name")
    # Nothing in play: by name only, the globbed ones fall past the cap.
    plain = [line for line in catalog(skills).splitlines() if line.startswith("- ")]
    assert plain[0] == "- s00: skill number 0"
    assert not any("zz-" in line for line in plain)
    assert catalog(()) == ""


def test_a_short_catalog_has_no_more_line(places: tuple[Path, Path]) -> None:
    workspace, user = places
    write_skill(user, "only")
    text = catalog(SkillLibrary(workspace, user).refresh().skills)
    assert text.splitlines()[-1] == "- only: Does a thing."
    assert "more available" not in text


# --- bundled files -----------------------------------------------------------------------


def test_a_resource_resolves_inside_the_skill_folder(tmp_path: Path) -> None:
    folder = tmp_path / "skill"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs/guide.md").write_text("guide")
    (folder / "inner-link.md").symlink_to(folder / "docs/guide.md")
    assert resolve_resource(folder, "docs/guide.md") == (folder / "docs/guide.md").resolve()
    assert resolve_resource(folder, "./inner-link.md") == (folder / "docs/guide.md").resolve()


@pytest.mark.parametrize(
    ("resource", "why"),
    [
        ("../secret.txt", "goes up with `..`"),
        ("docs/../../secret.txt", "goes up with `..`"),
        ("docs\\..\\..\\secret.txt", "goes up with `..`"),
        ("/etc/passwd", "absolute path"),
        ("~/.ssh/id_rsa", "absolute path"),
        ("C:\\Windows\\win.ini", "absolute path"),
        ("escape.txt", "leads out of the skill's folder through a symlink"),
        ("linked-dir/secret.txt", "leads out of the skill's folder through a symlink"),
        ("", "empty"),
    ],
)
def test_a_resource_outside_the_folder_is_refused(tmp_path: Path, resource: str, why: str) -> None:
    folder = tmp_path / "skill"
    folder.mkdir()
    (tmp_path / "secret.txt").write_text("secret")
    (folder / "escape.txt").symlink_to(tmp_path / "secret.txt")
    (folder / "linked-dir").symlink_to(tmp_path)
    with pytest.raises(ResourceRefused) as caught:
        resolve_resource(folder, resource)
    assert why in str(caught.value)


# --- the gate's rules ----------------------------------------------------------------------


def test_a_trust_question_asks_in_every_mode_and_over_allow_rules() -> None:
    facts = CallFacts(tool="skill", kind="read", trust="the skill x comes from the repository")
    for mode in ("ask", "edits", "auto"):
        policy = PermissionPolicy(mode=mode, allow=["skill"])
        verdict = policy.decide(facts)
        assert (verdict.action, verdict.always_rule) == ("ask", "")
    denied = PermissionPolicy(mode="auto", deny=["skill"]).decide(facts)
    assert denied.action == "deny"


@pytest.mark.parametrize(
    "path",
    [".tether/skills/x/SKILL.md", ".Claude/Skills/x/SKILL.md", ".agents/skills", "my/skills/a"],
)
def test_edits_in_a_skill_folder_ask_in_auto_unless_a_rule_names_them(path: str) -> None:
    facts = CallFacts(tool="write_file", kind="edit", path=path)
    protected = (".claude/skills", ".agents/skills", ".tether/skills", "my/skills")
    policy = PermissionPolicy(mode="auto", protected=protected)
    verdict = policy.decide(facts)
    assert verdict.action == "ask"
    assert "skill folder" in verdict.reason
    policy.session_rules = [verdict.always_rule]
    assert policy.decide(facts).action == "allow"
    elsewhere = CallFacts(tool="write_file", kind="edit", path="src/skills.py")
    assert PermissionPolicy(mode="auto", protected=protected).decide(elsewhere).action == "allow"
