"""The Python examples of a Markdown page, extracted and run.

Every fenced block marked ``python`` is one example: it runs on its own
(a fresh namespace), in a scratch directory, and must not raise.  The
tests run docs/python.md's this way (test_docs.py), and `make test` runs
them again with the package installed from a wheel:

    python doc_examples.py docs/python.md [--installed]

``--installed`` first checks that ``kvtier`` is imported from the running
interpreter's environment (an installed package), not from a checkout.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from pathlib import Path

_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def examples(page: Path) -> list[tuple[int, str]]:
    """The page's Python examples: (first line number, code)."""
    text = page.read_text()
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def run(page: Path, line: int, code: str) -> str:
    """Runs one example in a scratch directory; what it printed or logged."""
    out = io.StringIO()
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:
            # Line numbers in tracebacks are the page's.
            compiled = compile("\n" * (line - 1) + code, str(page), "exec")
            # What an example prints (and logs: the one whose callback
            # raises logs a traceback) is kept, not shown.
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                exec(compiled, {"__name__": "__main__"})
        finally:
            os.chdir(here)
    return out.getvalue()


def main(argv: list[str]) -> int:
    page = Path(argv[0]).resolve()
    if "--installed" in argv[1:]:
        import kvtier

        location = Path(kvtier.__file__).resolve()
        if not str(location).startswith(str(Path(sys.prefix).resolve())):
            print(f"kvtier comes from {location}, not from {sys.prefix}", file=sys.stderr)
            return 1
    found = examples(page)
    for line, code in found:
        run(page, line, code)
    print(f"{page.name}: {len(found)} examples ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
