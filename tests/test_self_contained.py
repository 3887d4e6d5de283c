"""The repository stands on its own sources: no file names a path outside it, a notes file a reader does not have, or
the papers by the names of such files; the papers are cited by their own objects (docs/papers.md lists them)."""
import re

from _repository import ROOT, repository_files

OUTSIDE = re.compile(r"\.\./shared|paper-notes|official-implementation\.md|notes §")
"""Paths out of the repository, and files of a private reading list."""
FILE_NAMES = re.compile(r"(?<![\d,.\w−-])(004|000)(?![\d,.\w])")
"""The papers named after files no reader has ("004", "000"), not numbers such as 1,000 or 0.004."""
BINARY = (".png", ".jpg", ".gz", ".pt", ".pth", ".npz", ".safetensors", ".ipynb")


def _tracked_text_files():
    return [path for path in repository_files() if not path.name.endswith(BINARY)]


def test_no_file_leans_on_sources_outside_the_repository():
    found = []
    for path in _tracked_text_files():
        if path.name in ("test_claim_metadata.py", "test_self_contained.py"):  # they spell the patterns out
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line) or FILE_NAMES.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found[:40])


def test_the_patterns_catch_what_they_must_and_spare_numbers():
    assert OUTSIDE.search("see ../shared/docs/x.md") and OUTSIDE.search("(paper-notes §7.11)")
    assert FILE_NAMES.search('"004" is the long paper') and FILE_NAMES.search("004 eq. (8)")
    assert not FILE_NAMES.search("1,000 steps; 0.004; −0.000; 2004; x004")
