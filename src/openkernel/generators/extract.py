"""Pull the candidate module out of a model's answer.

The prompt asks for a plan, then exactly one fenced ```python block. Answers vary: ```py,
unlabeled fences, several blocks (a sketch, then the final module), a truncated answer whose
fence never closes. The rule: among Python (or unlabeled) blocks, take the last one that
defines ``class ModelNew`` (else the last one). An answer with no Python block yields empty
code and a log that says why (no kernel came back). A block that is there but is no valid
module (it does not parse, or defines no top-level ``ModelNew``) keeps its code, with the
parser's message and line in ``error``: a kernel that did not compile, not a missing one.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from openkernel import syntax

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+.#-]*)[^\n`]*$")
_PYTHON_TAGS = {"", "python", "py", "python3", "py3", "pytorch"}
_IDEA = re.compile(r"^\s*(?:\*\*)?(?:idea|summary|plan)(?:\*\*)?\s*:\s*(?:\*\*)?\s*(.+)$",
                   re.IGNORECASE | re.MULTILINE)


@dataclass
class Extraction:
    """What came out of an answer; ``code`` is "" when the answer held no code (see ``log``),
    ``error`` the parser's message when the code is there but is no valid module."""

    code: str
    reasoning: str = ""
    description: str = ""
    log: str = ""
    error: str = ""


@dataclass
class _Block:
    tag: str
    start: int  # character offset of the opening fence line
    code: str
    closed: bool


def _blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    lines = text.splitlines(keepends=True)
    offset, i = 0, 0
    while i < len(lines):
        m = _FENCE.match(lines[i].rstrip("\r\n"))
        if not m:
            offset += len(lines[i])
            i += 1
            continue
        fence, tag, start = m.group(1), m.group(2).lower(), offset
        body: list[str] = []
        offset += len(lines[i])
        i += 1
        closed = False
        while i < len(lines):
            line = lines[i]
            offset += len(line)
            i += 1
            stripped = line.strip()
            # A closing fence is the same character, at least as long, with nothing after it.
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                closed = True
                break
            body.append(line)
        blocks.append(_Block(tag, start, "".join(body), closed))
    return blocks


def describe(reasoning: str, limit: int = 120) -> str:
    """One line of what the candidate tries: an "Idea:" line, else the first sentence."""
    m = _IDEA.search(reasoning)
    text = m.group(1) if m else ""
    if not text:
        for line in reasoning.splitlines():
            line = line.strip().lstrip("#*->").strip()
            if line:
                text = re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0]
                break
    text = text.strip().strip("*").strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def extract_code(answer: str) -> Extraction:
    """The ``ModelNew`` module from ``answer``, or empty code and the reason."""
    if not answer or not answer.strip():
        return Extraction(code="", log="extraction: the answer is empty")
    blocks = _blocks(answer)
    if not blocks:
        return Extraction(code="", reasoning=answer.strip(), description=describe(answer),
                          log="extraction: no fenced code block in the answer (expected "
                          "```python ... ```)")
    python = [b for b in blocks if b.tag in _PYTHON_TAGS]
    if not python:
        tags = sorted({b.tag for b in blocks})
        return Extraction(code="", reasoning=answer.strip(), description=describe(answer),
                          log=f"extraction: no Python code block (found {', '.join(tags)} "
                          "blocks); the candidate must be a Python module defining ModelNew")
    with_model = [b for b in python if "class ModelNew" in b.code]
    block = with_model[-1] if with_model else python[-1]
    reasoning = answer[: block.start].strip()
    notes = []
    if len(with_model) > 1:
        notes.append(f"extraction: {len(with_model)} blocks define ModelNew; took the last")
    result = Extraction(code=block.code.strip("\n") + "\n", reasoning=reasoning,
                        description=describe(reasoning))
    if not block.closed:
        notes.append("extraction: the code block is not terminated (answer cut off, perhaps "
                      "by max_tokens)")
    result.log = "\n".join(notes)
    try:
        tree = syntax.parse(result.code)
    except SyntaxError as err:
        result.error = syntax_message(err, result.code)
        return result
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        result.error = ("the code block defines no top-level class ModelNew" if with_model else
                        "no code block defines class ModelNew")
    return result


def syntax_message(err: SyntaxError, code: str) -> str:
    """Python's own account of a syntax error: the message, the line and that line's text."""
    where = f"line {err.lineno}" + (f", column {err.offset}" if err.offset else "")
    lines = code.splitlines()
    text = lines[err.lineno - 1] if err.lineno and 0 < err.lineno <= len(lines) else ""
    return f"SyntaxError: {err.msg} ({where})" + (f"\n    {text.strip()}" if text.strip() else "")
