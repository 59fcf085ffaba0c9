"""The README and docs/ as a newcomer reads them: one page of at most 300 lines, every relative
link (and its #anchor) found, every guide opening with the command that does its job, and every
`rmbench-fast ...` line of a code block naming a command and options that the CLI has."""

import re
import shlex
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def anchors(page: Path) -> set:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in page.read_text().splitlines() if line.startswith("#")}


def code_lines(page: Path):
    """The shell lines of the page's bash code blocks, continuation lines joined."""
    text, inside, lines = page.read_text(), False, []
    for line in text.splitlines():
        if line.startswith("```"):
            inside = line.strip() in ("```bash", "```sh", "```console") if not inside else False
            continue
        if inside:
            if lines and lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1] + " " + line.strip()
            else:
                lines.append(line.strip())
    return lines


def test_the_readme_is_one_page():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= 300, f"README.md has {n} lines"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_is_found(page):
    missing = []
    for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            missing.append(link)
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            missing.append(f"{link} (no such heading)")
    assert not missing, f"{page.name}: {missing}"


def test_every_guide_is_linked_from_the_readme_and_opens_with_its_command():
    readme = (ROOT / "README.md").read_text()
    for guide in PAGES[1:]:
        assert f"(docs/{guide.name})" in readme, f"README.md does not link docs/{guide.name}"
        lines = [line for line in guide.read_text().splitlines() if line.strip()]
        assert lines[0].startswith("# ") and lines[1].startswith("```"), f"docs/{guide.name} opens with {lines[1]!r}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_line_names_what_the_cli_has(page):
    from rmbench_fast.cli.main import main

    wrong = []
    for line in code_lines(page):
        if "rmbench-fast " not in line:
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens, commands = list(lexer), [[]]
        for t in tokens:
            if t in ("&&", "|", ";", "||"):
                commands.append([])
            else:
                commands[-1].append(t)
        for words in commands:
            if not words or words[0] != "rmbench-fast":
                continue
            part = " ".join(words)
            cmd, rest = main, words[1:]
            while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
                if rest[0] not in cmd.commands:
                    wrong.append(f"{part.strip()}: no command {rest[0]!r}")
                    break
                cmd, rest = cmd.commands[rest[0]], rest[1:]
            if any(isinstance(p, click.Argument) and p.nargs == -1 for p in cmd.params):
                continue  # passes its arguments on (bench: benchmarks/throughput.py's own options)
            options = {o for p in cmd.params for o in p.opts + p.secondary_opts}
            wrong += [f"{part.strip()}: {cmd.name} has no {w.split('=')[0]}" for w in rest
                      if w.startswith("--") and w.split("=")[0] not in options]
    assert not wrong, f"{page.name}: {wrong}"
