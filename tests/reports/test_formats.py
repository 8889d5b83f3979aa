"""The Markdown report escapes only what Markdown reads as markup where a value goes."""

from __future__ import annotations

import pytest

from cdnlake.reports.formats import md_escape


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("www.example.com", "www.example.com"),
        ("/a-b/c+d#e(1)!", "/a-b/c+d#e(1)!"),
        (40.0, "40.0"),
        ("a|b", "a\\|b"),
        ("*x* _y_ `z` ~~w~~", "\\*x\\* \\_y\\_ \\`z\\` \\~\\~w\\~\\~"),
        ("[x](http://e.example/)", "\\[x\\](http://e.example/)"),
        ("![i](//e.example/p.png)", "!\\[i\\](//e.example/p.png)"),
        ("<script>alert(1)</script>", "\\<script\\>alert(1)\\</script\\>"),
        ("&amp; \\", "\\&amp; \\\\"),
        ("two\nlines", "two lines"),
    ],
)
def test_markdown_escapes_only_markup(value, shown):
    assert md_escape(value) == shown
