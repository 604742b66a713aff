"""The skills catalog's build time with 64 skills (the most tether loads).

Writes 64 skills (in a temporary folder, removed afterwards): 32 in a user folder and 32 in a
workspace's `.tether/skills/`, each with a few lines of front matter (one in four with
`paths` globs) and a 3 KB body. Measured in a fresh child process each run:

  import    importing PyYAML (with its C loader), which the first skill file read does
  cold      the first `SkillLibrary.refresh` (list the folders, stat, read and parse 64 files)
  warm      a refresh with nothing changed (what every turn's start costs): stats only
  one edit  a refresh after one SKILL.md changed (that file parsed again)
  catalog   the system prompt's section for 64 skills with 20 files in play

Target: warm < 2 ms (it runs at every turn's start); the rest is reported (the daemon reads
the skills once in a worker thread when it starts, so a first turn rarely pays for them).

Usage: python bench/skills_catalog.py [--runs N]
Takes a few seconds.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import handle_sigterm, load_line, machine_line, median, ms, row, verdict

WARM_TARGET = 0.002
SKILLS = 64

CHILD = r"""
import json, os, sys, time
from pathlib import Path
from tether.daemon.skills.catalog import catalog
from tether.daemon.skills.library import SkillLibrary

root = Path(sys.argv[1])
start = time.perf_counter(); import yaml; imported = time.perf_counter() - start
library = SkillLibrary(root / "project", root / "user")
start = time.perf_counter(); found = library.refresh(); cold = time.perf_counter() - start
assert len(found.skills) == 64, (len(found.skills), found.invalid)
warm = []
for _ in range(50):
    start = time.perf_counter(); again = library.refresh(); warm.append(time.perf_counter() - start)
    assert again is found
edited = root / "user" / "skill-00" / "SKILL.md"
stat = edited.stat()
os.utime(edited, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
start = time.perf_counter(); library.refresh(); one = time.perf_counter() - start
files = [f"src/pkg{i}/module{i}.py" for i in range(20)]
texts = []
start = time.perf_counter()
for _ in range(50):
    texts.append(catalog(library.current.skills, files))
built = (time.perf_counter() - start) / 50
print(json.dumps({"import": imported, "cold": cold, "warm": sorted(warm)[25], "one": one,
                  "catalog": built, "chars": len(texts[0])}))
"""


def write_skills(root: Path) -> None:
    body = "\n".join(
        f"Step {n}: do the part of the work numbered {n} carefully." for n in range(60)
    )
    for index in range(SKILLS):
        parent = root / "user" if index < SKILLS // 2 else root / "project" / ".tether" / "skills"
        folder = parent / f"skill-{index:02}"
        folder.mkdir(parents=True)
        globs = f"paths: ['**/*.py', 'src/pkg{index}/**']\n" if index % 4 == 0 else ""
        (folder / "SKILL.md").write_text(
            f"---\nname: skill-{index:02}\ndescription: >\n  What skill {index} is for, in a "
            f"sentence or two\n  that the model reads in the catalog.\nlicense: MIT\n{globs}"
            f"---\n# Skill {index}\n\n{body}\n"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    handle_sigterm()
    print(f"skills catalog, {SKILLS} skills ({machine_line()}; {load_line()})")
    readings: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="tether-bench-skills-") as temp:
        root = Path(temp)
        (root / "project").mkdir()
        write_skills(root)
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        for _ in range(args.runs):
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(root)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            readings.append(json.loads(done.stdout))

    def med(key: str) -> float:
        return median([reading[key] for reading in readings])

    warm = med("warm")
    row("import PyYAML", ms(med("import")))
    row("cold refresh (64 files read and parsed)", ms(med("cold")))
    row(
        "warm refresh, nothing changed",
        ms(warm),
        f"< {ms(WARM_TARGET)}",
        verdict(warm, WARM_TARGET),
    )
    row("refresh after one SKILL.md changed", ms(med("one")))
    row("catalog text, 20 files in play", ms(med("catalog")), note=f"{int(med('chars'))} chars")


if __name__ == "__main__":
    main()
