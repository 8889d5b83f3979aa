"""url_parts (one-pass pattern) splits exactly as the plain RFC 3986 reading does."""

from __future__ import annotations

import random

import polars as pl

from cdnlake.ingest.normalize import url_parts

# The obvious pattern, as the specification: it is slower (not one-pass), not different.
REFERENCE = r"^([A-Za-z][A-Za-z0-9+.\-]*)://([^/?#]*)([^?#]*)"


def test_one_pass_pattern_agrees_with_the_plain_one_on_odd_urls():
    rng = random.Random(7)
    chars = "ab:/?#.+-é1 %"
    urls: list[str | None] = [
        None, "", "https://", "http://h", "HTTP://H/p?q#f", "x://a#b/c", "1http://a/b",
        "https://a?b/c", "a+b.c-d://host:80/p/a/t/h#frag?x", "://nohost/p", "noscheme/path",
        "https:/x/y", "h://?", "https://a/b://c/d", "https://é/ü?x", "https://[::1]:8080/x",
    ]  # fmt: skip
    for _ in range(5000):
        tail = "".join(rng.choice(chars) for _ in range(rng.randint(0, 14)))
        urls.append(tail)
        urls.append(rng.choice(["http", "h1", "1h", "a.b", "S+c"]) + "://" + tail)
    frame = pl.DataFrame({"url": urls})
    got = frame.select(url_parts(pl.col("url")))
    ref = frame.select(pl.col("url").str.extract_groups(REFERENCE).alias("p")).select(
        pl.col("p").struct.field("1").str.to_lowercase().alias("_scheme"),
        pl.col("p").struct.field("2").alias("_host"),
        pl.col("p").struct.field("3").alias("_path"),
    )
    assert got.equals(ref)
    assert got.row(4) == ("http", "H", "/p")
