"""What a user reads is true and current: no process words or stale weights in the README, docs/ and examples/
(each forbidden pattern proven against the sentence it was written for, so that a pattern that no longer matches
anything fails here instead of passing silently), links to sections that exist, one wording of the weight advice,
the example configs shipped, and extras that leave what a user has installed as it is."""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from del_plugin.hf.settings import DEFAULT_ALPHA

from repo import REPO

USER_DOCS = sorted(
    [REPO / "README.md", REPO / "CONTRIBUTING.md", *REPO.glob("docs/**/*.md")]
    + [p for p in REPO.glob("examples/**/*") if p.suffix in (".yml", ".yaml", ".py")]
)
CODE = sorted(REPO.glob("del_plugin/**/*.py"))


@dataclass(frozen=True)
class Forbidden:
    pattern: str
    why: str
    written_for: tuple[str, ...]  # the sentences it was written against: each must match
    allowed: tuple[str, ...] = ()  # sentences it must leave alone
    files: tuple[str, ...] = ()  # only these (relative paths), else every file scanned

    def regex(self) -> re.Pattern:
        return re.compile(self.pattern, re.IGNORECASE | re.MULTILINE)


ALPHA = re.escape(f"{DEFAULT_ALPHA:g}")
PROCESS_WORDS = [
    Forbidden(
        r"\bissues? #?\d+",
        "a tracker's issue number means nothing to a user: say what was measured, where and when (a commit)",
        ("reported in issue 29", "## DEL at GPU speed (issue 29)", "before issue 29's changes"),
        ("see the issues of Axolotl's repository",),
    ),
    Forbidden(
        r"\bthis (?:session|task)\b",
        "the work's own circumstances: say 'not yet measured on a GPU'",
        ("**not measured: no GPU in this session**", "No GPU was lent to this task."),
        ("a program that starts a session of its own",),
    ),
    Forbidden(
        r"\blent\b",
        "who was lent what: say what was measured on what",
        ("no GPU was lent to this work",),
        ("a relentless loop",),
    ),
    Forbidden(
        r"\bno GPU (?:was|were|has been|had been|is) (?:available|lent|used)\b",
        "why something was not done: say that it is not yet measured on a GPU",
        ("(not run for this page: no GPU was available;", "run them (no GPU was available to this project)."),
        ("runs offline, no GPU needed", "no GPU is needed"),
    ),
    Forbidden(
        r"\bround \d+\b(?!\.\d)|\bthe lead\b|\bhelpers? \"",
        "the project's way of working",
        ("after round 4's first-hour work", 'helper "lifecycle"'),
        ("per round 1.00x-1.16x", "tests/helpers/axolotl_helpers.py"),
    ),
]
STALE = [
    Forbidden(
        rf"\bCE \+ (?!{ALPHA}\b)\d[\d.]* \* L_num",
        f"the same run in every host is written at the default weight, {DEFAULT_ALPHA:g}",
        ("The same run, `L = CE + 0.3 * L_num` with",),
        (f"`L = CE + {DEFAULT_ALPHA:g} * L_num`", "`L = CE + del_alpha * L_num`"),
        ("docs/hosts.md", "README.md", "docs/method.md"),
    ),
    Forbidden(
        rf"^[ \t]*alpha = (?!{ALPHA}\b)\d",
        f"the custom loop is written at the default weight, {DEFAULT_ALPHA:g}",
        ("alpha = 0.3\nvocab = DigitVocab.from_tokenizer(tokenizer)",),
        (f"alpha = {DEFAULT_ALPHA:g}",),
        ("docs/hosts.md", "README.md"),
    ),
    Forbidden(
        rf"\bDEL's (?:default(?: weight)?,? )?(?!{ALPHA}\b)\d+\.\d+",
        f"DEL's default weight is {DEFAULT_ALPHA:g} (DEFAULT_ALPHA)",
        ("(DEL's 0.1 would train 90 % cross-entropy)",),
        (f"(DEL's default, {DEFAULT_ALPHA:g}, would train 97 % cross-entropy)",),
    ),
    Forbidden(
        r"^(?=.*qwen2\.5)(?!.*8 GPUs)(?!.*\b1\.28\b).*\b2\.56\b.*$",
        "2.56 for Qwen2.5-7B assumes the authors trained it on 8 GPUs (1.28 on 4): say so where it is given",
        (
            "| Qwen2.5-7B | `examples/qwen2.5-7b/qlora-24gb.yml` | `examples/qwen2.5-7b/paper-full-fsdp.yml` | 2.56 |",
            "# PAPER REPRODUCTION: 2.56 is the authors' weight for Qwen2.5, converted to this normalisation (below;",
        ),
        ("| Qwen2.5-7B | alpha 0.01, G 32, transformers 4.57.1, **8 GPUs assumed** | 0.01 x 32 x 8 | **2.56** |",),
    ),
    Forbidden(
        r"\bWhat DEL computes\b\"?\)",
        "a README section that moved to docs/method.md",
        ('digit_targets count digits, not tokens (README, "What DEL computes").',),
        ("# What DEL computes, and how it reads digits and numbers",),
    ),
]


@pytest.mark.parametrize("rule", PROCESS_WORDS + STALE, ids=lambda r: r.pattern[:40])
def test_each_forbidden_pattern_matches_what_it_was_written_for(rule):
    for sentence in rule.written_for:
        assert rule.regex().search(sentence), (rule.pattern, sentence)
    for sentence in rule.allowed:
        assert not rule.regex().search(sentence), (rule.pattern, sentence)


def test_the_scan_reads_the_files_users_read():
    names = {str(p.relative_to(REPO)) for p in USER_DOCS}
    assert {"README.md", "docs/hosts.md", "docs/benchmarks.md", "examples/compare-with-mle.yml"} <= names
    assert any(n.startswith("examples/ablation/") for n in names) and len(CODE) > 40
    for rule in STALE:
        assert all((REPO / f).is_file() for f in rule.files), rule.files


def _hits(rules: list[Forbidden], files: list[Path]) -> list[str]:
    found = []
    for path in files:
        relative = str(path.relative_to(REPO))
        text = path.read_text(encoding="utf-8")
        for rule in rules:
            if rule.files and relative not in rule.files:
                continue
            for match in rule.regex().finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{relative}:{line}: {match.group(0)!r}: {rule.why}")
    return found


def test_no_process_words_in_what_users_read_nor_in_the_code():
    assert _hits(PROCESS_WORDS, USER_DOCS + CODE) == []


def test_no_stale_weights_in_what_users_read():
    assert _hits(STALE, USER_DOCS) == []


# ---------------------------------------------------------------------------------------------- links


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(path: Path) -> list[str]:
    """The markdown headings of ``path``, outside fenced code blocks."""
    headings, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)$", line)):
            headings.append(match.group(1).strip())
    return headings


def _anchors(path: Path) -> set[str]:
    return {_anchor(h) for h in _headings(path)}


def test_every_link_to_a_section_names_one_that_exists():
    broken = []
    for path in [p for p in USER_DOCS if p.suffix == ".md"]:
        for target, anchor in re.findall(r"\]\(([^)\s#]*)#([^)\s]+)\)", path.read_text(encoding="utf-8")):
            page = (path.parent / target).resolve() if target else path
            if page.suffix == ".md" and anchor not in _anchors(page):
                broken.append(f"{path.relative_to(REPO)}: {target}#{anchor}")
    assert broken == []


def test_every_quoted_readme_section_exists():
    headings = set(_headings(REPO / "README.md"))
    quoted = []
    for path in USER_DOCS:
        text = " ".join(path.read_text(encoding="utf-8").split())
        quoted += [(path, q) for q in re.findall(r"README(?:\.md)?,? \(?\"([^\"]+)\"", text)]
    assert quoted, "no quoted README section found: the pattern above no longer reads the docs"
    assert [f"{p.relative_to(REPO)}: {q}" for p, q in quoted if q not in headings] == []


# ---------------------------------------------------------------------------------------------- the advice


def test_one_wording_of_the_weight_advice():
    """The bold sentence under "The advice" in docs/choosing-del-alpha.md, word for word in the README and in
    docs/efficacy.md; it names the default weight."""
    page = (REPO / "docs" / "choosing-del-alpha.md").read_text(encoding="utf-8")
    section = page[page.index("## The advice") :]
    advice = " ".join(re.search(r"\*\*(.+?)\*\*", section, re.S).group(1).split())
    assert f"`del_alpha: {DEFAULT_ALPHA:g}`" in advice and "`del_alpha: 0` twin" in advice
    for name in ("README.md", "docs/efficacy.md"):
        assert f"**{advice}**" in " ".join((REPO / name).read_text(encoding="utf-8").split()), name


# ---------------------------------------------------------------------------------------------- what pip installs


def test_the_extras_a_user_installs_are_ranges_that_admit_the_tested_versions():
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    locked = dict(line.split("==", 1) for line in (REPO / "requirements.lock").read_text().splitlines() if "==" in line)
    # the suite's own pins are no user-facing extra: requirements-dev.txt, which make installs
    assert "test" not in setup["options.extras_require"]
    for lines in setup["options.extras_require"].values():
        for line in filter(None, (x.split("#")[0].strip() for x in lines.splitlines())):
            requirement = Requirement(line)
            assert not any(s.operator in ("==", "===") for s in requirement.specifier), line
            if requirement.name in locked:
                assert locked[requirement.name] in requirement.specifier, (line, locked[requirement.name])
    assert setup["options.extras_require"]["eval"].split() == [
        "matplotlib>=3.8,<4",
        "tqdm>=4.66,<5",
        "scipy>=1.11,<2",
        "math-verify[antlr4_13_2]>=0.9,<0.10",
    ]


INSTALL = re.compile(r"""pip install (?:-e )?["']?([^\s"'`\[]*del-plugin)\b""")


def test_del_plugin_is_installed_the_same_way_everywhere_a_user_reads():
    """Every `pip install` of the plugin, with or without an extra, installs it as the README does: from the source
    folder (a package name would look it up on an index)."""
    readme = INSTALL.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert readme and set(readme) == {"/path/to/del-plugin"}, readme
    assert INSTALL.findall("pip install 'del-plugin[eval]'") == ["del-plugin"]  # the spelling it was written against
    elsewhere = {
        f"{path.relative_to(REPO)}: {source}"
        for path in USER_DOCS
        for source in INSTALL.findall(path.read_text(encoding="utf-8"))
        if source != "/path/to/del-plugin"
    }
    assert elsewhere == set()
    assert INSTALL.findall((REPO / "docs" / "evaluation.md").read_text(encoding="utf-8")), "docs/evaluation.md"


def test_the_examples_command_writes_every_example_from_a_clone(tmp_path, capsys):
    from del_plugin.examples import main

    assert main([str(tmp_path / "examples")]) == 0
    shipped = sorted(p.relative_to(REPO / "examples") for p in (REPO / "examples").rglob("*") if p.is_file())
    shipped = [p for p in shipped if "__pycache__" not in p.parts]
    written = sorted(p.relative_to(tmp_path / "examples") for p in (tmp_path / "examples").rglob("*") if p.is_file())
    assert written == shipped and Path("compare-with-mle.yml") in written
    assert all((tmp_path / "examples" / p).read_bytes() == (REPO / "examples" / p).read_bytes() for p in written)
    assert main([str(tmp_path / "examples")]) == 1  # nothing is overwritten
    assert "already there; nothing written: choose another folder" in capsys.readouterr().err
