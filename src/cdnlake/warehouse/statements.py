"""SQL text cut into statements at the semicolons that end them (not those inside a
string, a quoted name or a comment): what the shell needs to know whether a statement is
complete, and what ``sql --file`` runs one after the other."""

from __future__ import annotations


def split_statements(text: str) -> tuple[list[str], str]:
    """The complete statements of ``text`` (each without its ``;``; empty ones and those
    holding only comments left out), and what follows the last ``;`` (an unfinished
    statement, or only blanks and comments)."""
    statements: list[str] = []
    start = 0
    i = 0
    n = len(text)
    while i < n:
        char = text[i]
        if char in "'\"":  # a string or a quoted name; a doubled quote stays inside
            end = text.find(char, i + 1)
            while end != -1 and end + 1 < n and text[end + 1] == char:
                end = text.find(char, end + 2)
            if end == -1:
                break  # unfinished: the rest is one unfinished statement
            i = end + 1
            continue
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end == -1 else end + 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end == -1:
                break
            i = end + 2
            continue
        if char == ";":
            statement = text[start:i]
            if has_code(statement):
                statements.append(statement.strip())
            start = i + 1
        i += 1
    return statements, text[start:]


def has_code(text: str) -> bool:
    """Whether ``text`` holds more than blanks and complete comments (an unfinished
    comment counts as more: the statement it is part of goes on)."""
    i = 0
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end == -1 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end == -1:
                return True  # an unfinished comment: more is to come
            i = end + 2
        else:
            return True
    return False


def all_statements(text: str) -> list[str]:
    """Every statement of a script: a last one without its ``;`` counts too."""
    statements, rest = split_statements(text)
    if has_code(rest):
        statements.append(rest.strip())
    return statements
