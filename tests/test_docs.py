"""The documentation's Python examples are valid Python (they are what users paste first)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the pages with examples (docs/api.md's Python blocks are signatures: ``*``, ``**kwargs``, ``...``)
PAGES = [ROOT / "README.md", ROOT / "docs" / "user_guide.md", ROOT / "docs" / "architecture.md"]


def _blocks():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
            line = text.count("\n", 0, match.start()) + 2
            yield pytest.param(match.group(1), id=f"{page.name}:{line}")


@pytest.mark.parametrize("code", list(_blocks()))
def test_python_examples_compile(code):
    """Before: the README's grid search put its parameter grid's opening brace in a comment (a SyntaxError
    when pasted)."""
    compile(code, "<example>", "exec")
