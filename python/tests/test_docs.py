"""Every Python example of docs/python.md runs (doc_examples.py): the
quick start cannot drift from the package."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvtier
from doc_examples import examples, run

PAGE = Path(__file__).resolve().parents[2] / "docs" / "python.md"
EXAMPLES = examples(PAGE)


def test_the_page_has_its_examples():
    # A fence typed wrong would drop an example silently.
    assert len(EXAMPLES) >= 10, [line for line, _ in EXAMPLES]


@pytest.mark.parametrize("line,code", EXAMPLES, ids=[f"line-{line}" for line, _ in EXAMPLES])
def test_example_runs(line, code):
    try:
        run(PAGE, line, code)
    finally:
        kvtier.set_log_callback(None)
