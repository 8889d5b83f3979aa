"""SQL cut into statements at the semicolons that end them."""

from __future__ import annotations

import pytest

from cdnlake.warehouse.statements import all_statements, has_code, split_statements


@pytest.mark.parametrize(
    ("text", "statements", "rest"),
    [
        ("SELECT 1;", ["SELECT 1"], ""),
        ("SELECT 1; SELECT 2", ["SELECT 1"], " SELECT 2"),
        ("SELECT ';' AS s;", ["SELECT ';' AS s"], ""),
        ("SELECT 'it''s; here';", ["SELECT 'it''s; here'"], ""),
        ('SELECT 1 AS "a;b";', ['SELECT 1 AS "a;b"'], ""),
        ("SELECT 1 -- no; end\n;", ["SELECT 1 -- no; end"], ""),
        ("SELECT /* ; */ 1;", ["SELECT /* ; */ 1"], ""),
        ("SELECT 'open;", [], "SELECT 'open;"),  # a string still open: not ended
        ("SELECT 1 /* open;", [], "SELECT 1 /* open;"),
        (";; -- only;\n;", [], ""),  # empty statements and comments are no statements
    ],
)
def test_split_statements(text, statements, rest):
    assert split_statements(text) == (statements, rest)


def test_has_code_and_a_script_without_a_last_semicolon():
    assert not has_code("  -- a comment\n /* another */ \n")
    assert has_code("/* not closed yet")  # the statement goes on
    assert all_statements("CREATE TABLE t (a INT);\nSELECT * FROM t\n-- done\n") == [
        "CREATE TABLE t (a INT)",
        "SELECT * FROM t\n-- done",
    ]
    assert all_statements("-- nothing\n") == []
