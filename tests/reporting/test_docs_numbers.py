"""Every result number the docs state is read from a committed file the suite regenerates.

The pages under ``docs/experiments/`` and the README's Results section mark where their numbers come
from with HTML comments (invisible on the rendered page)::

    <!-- numbers: ../results/snr_filter_frozenlake/report.md -->
    Final success 0.799 ± 0.007 without the filter ...
    <!-- /numbers -->

Every decimal number inside such a region must appear in one of the named files (paths relative to
the page; with its sign when the page writes one); ``<!-- numbers: paper -->`` marks numbers quoted
from the papers, and ``<!-- numbers: bound -->`` numbers that ``test_bound_numbers.py`` ties one by one to
their result set, arm and metric (the stricter check: this one only finds a number somewhere in a file). A decimal number outside every region is an error, unless it stands in a part marked
not recomputable: a page whose first paragraph is a ``Not recomputable`` / ``Not evidence yet`` banner, or
a ``##`` section that opens with one. Integers (seed counts, iteration counts) are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_RECOMPUTABLE = "> **Not recomputable from committed data.**"
# the banners that mark a page or section as a record rather than evidence
BANNERS = (NOT_RECOMPUTABLE, "> **Not evidence yet.**")
# a decimal number, not part of a version (2.13.0), a path, a section (§3.3) or an arXiv id (stripped first)
_NUMBER = re.compile(r"(?<![\w.§])[+\-−]?\d+\.\d+(?![\d]|\.\d)")
_ARXIV = re.compile(r"arXiv:?\s*\d{4}\.\d{4,5}")
_OPEN = re.compile(r"<!-- numbers: (.+?) -->")
_CLOSE = "<!-- /numbers -->"
# regions whose numbers are not looked up in files: quoted from a paper, or bound by test_bound_numbers.py
SPECIAL = {"paper", "bound"}


def _numbers(text: str) -> list[str]:
    return [n.replace("−", "-") for n in _NUMBER.findall(_ARXIV.sub("", text))]


def _found(number: str, pool: set[str]) -> bool:
    if number[0] in "+-":
        return number in pool
    return number in {n.lstrip("+-") for n in pool}


def unsourced_numbers(text: str, page: Path) -> list[str]:
    """Problems with the numbers of one page: ``[]`` when each is inside a region whose files hold it.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "report.md").write_text("| none | 0.799 ± 0.007 | +0.025 |")
        >>> unsourced_numbers("<!-- numbers: report.md -->\\n0.799 ± 0.007, +0.025\\n<!-- /numbers -->", d / "p.md")
        []
        >>> unsourced_numbers("<!-- numbers: report.md -->\\n0.800 and -0.025\\n<!-- /numbers -->", d / "p.md")
        ['p.md:2: 0.800 is not in report.md', 'p.md:2: -0.025 is not in report.md']
        >>> unsourced_numbers("Success rose to 0.83.", d / "p.md")
        ['p.md:1: 0.83 is outside every <!-- numbers: ... --> region']
    """
    problems: list[str] = []
    sources: list[str] | None = None
    pool: set[str] = set()
    exempt = False
    lines = text.splitlines()
    first_paragraph = next((line for line in lines[1:] if line.strip()), "")
    page_exempt = first_paragraph.startswith(BANNERS)
    for i, line in enumerate(lines, 1):
        if line.startswith("## "):
            exempt = next((x for x in lines[i:] if x.strip()), "").startswith(BANNERS)
        opened = _OPEN.search(line)
        if opened:
            if sources is not None:
                problems.append(f"{page.name}:{i}: a numbers region opens inside another")
            sources = opened.group(1).split()
            pool = set()
            for name in sources:
                if name in SPECIAL:
                    continue
                path = page.parent / name
                if not path.is_file():
                    problems.append(f"{page.name}:{i}: {name} does not exist")
                    continue
                pool.update(_numbers(path.read_text(encoding="utf-8")))
            continue
        if _CLOSE in line:
            if sources is None:
                problems.append(f"{page.name}:{i}: {_CLOSE} without an open region")
            sources = None
            continue
        for number in _numbers(line):
            if sources is None:
                if not (page_exempt or exempt):
                    problems.append(f"{page.name}:{i}: {number} is outside every <!-- numbers: ... --> region")
            elif not SPECIAL & set(sources) and not _found(number, pool):
                problems.append(f"{page.name}:{i}: {number} is not in {' '.join(sources)}")
    if sources is not None:
        problems.append(f"{page.name}: a numbers region is never closed")
    return problems


def _readme_results() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Results")
    end = text.index("\n## ", start + 1)
    return text[start + 1 : end]


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "experiments").glob("*.md")), ids=lambda p: p.name)
def test_every_number_on_an_experiment_page_comes_from_a_committed_file(page):
    assert unsourced_numbers(page.read_text(encoding="utf-8"), page) == []


def test_every_number_in_the_readme_results_comes_from_a_committed_file():
    assert unsourced_numbers("# README\n\n" + _readme_results(), ROOT / "README.md") == []


def test_a_page_marked_not_recomputable_is_exempt_and_a_marked_section_alone():
    page = ROOT / "docs" / "experiments" / "x.md"
    assert unsourced_numbers(f"# X\n\n{NOT_RECOMPUTABLE} Old.\n\nSuccess 0.83.\n", page) == []
    text = f"# X\n\n## Old\n\n{NOT_RECOMPUTABLE} Old.\n\nSuccess 0.83.\n\n## New\n\nSuccess 0.84.\n"
    assert unsourced_numbers(text, page) == ["x.md:11: 0.84 is outside every <!-- numbers: ... --> region"]


def test_bound_regions_are_left_to_the_strict_test():
    page = ROOT / "docs" / "experiments" / "x.md"
    assert unsourced_numbers("# X\n\n<!-- numbers: bound -->\nSuccess 0.83.\n<!-- /numbers -->\n", page) == []


def test_paper_regions_versions_and_arxiv_ids_are_not_checked():
    page = ROOT / "docs" / "experiments" / "x.md"
    text = "# X\n\narXiv 2510.12264, torch 2.13.0.\n<!-- numbers: paper -->\nSpearman +0.39.\n<!-- /numbers -->\n"
    assert unsourced_numbers(text, page) == []
