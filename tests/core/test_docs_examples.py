"""The documentation's runnable examples run as written.

Every fenced block in README.md and docs/**/*.md whose info string is ``python runnable``
is executed in a fresh namespace, in this process, with no AWS or runlane settings in the
environment; zero-argument ``test_*`` functions it defines are then called. Such a block
must be self-contained and use the in-memory app (``runlane_sqs.testing``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
RUNNABLE = ["python", "runnable"]


@dataclass(frozen=True)
class Block:
    path: str
    line: int
    """Line of the opening fence (1-based); the code starts on the next one."""
    code: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def find_blocks(text: str, name: str) -> list[Block]:
    """The ``python runnable`` fenced blocks of one Markdown text."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        i += 1
        if opening is None:
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        start = i
        while i < len(lines) and not (
            lines[i].strip().startswith(fence) and not lines[i].strip().strip(fence[0])
        ):
            i += 1
        if opening["info"].split() == RUNNABLE:
            code = "\n".join(line[indent:] for line in lines[start:i])
            blocks.append(Block(name, start, code))
        i += 1
    return blocks


def run_block(block: Block) -> None:
    """Execute a block; an exception, or a failed assert in it, propagates. Tracebacks
    name the Markdown file and its line numbers."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile("\n" * block.line + block.code, block.path, "exec"), namespace)
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            value()


BLOCKS = [
    block
    for path in DOCS
    for block in find_blocks(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
]


@pytest.fixture
def no_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS or runlane variables, and no AWS config or credentials files."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "RUNLANE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "missing-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "missing-credentials"))


@pytest.mark.timeout(10)
@pytest.mark.usefixtures("no_settings")
@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_runnable_block_runs(block: Block) -> None:
    run_block(block)


def test_runnable_blocks_are_found_and_none_is_empty() -> None:
    assert len(BLOCKS) >= 5, "the docs check found (almost) no ```python runnable blocks"
    assert [block.where for block in BLOCKS if not block.code.strip()] == []


def test_the_check_finds_only_runnable_blocks_and_fails_when_one_raises() -> None:
    sample = """```python
raise AssertionError("not runnable, never run")
```
1. a list item
   ```python runnable
   assert 1 + 1 == 3
   ```
````python runnable
def test_defined_in_a_block():
    raise RuntimeError("called")
````
```python runnable
```
"""
    failing, defining, empty = find_blocks(sample, "sample.md")
    assert (failing.where, failing.code) == ("sample.md:5", "assert 1 + 1 == 3")
    assert (empty.where, empty.code) == ("sample.md:12", "")
    with pytest.raises(AssertionError):
        run_block(failing)
    with pytest.raises(RuntimeError, match="called"):
        run_block(defining)
