"""with_url_parts (cut by lengths) splits exactly as the plain RFC 3986 reading does."""

from __future__ import annotations

import random

import polars as pl

from cdnlake.ingest.normalize import URL_PATTERN, with_url_parts


def test_url_parts_agree_with_the_plain_pattern_on_odd_urls():
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
    got = with_url_parts(frame).select("_scheme", "_host", "_path")
    assert got.equals(reference_parts(frame))
    assert got.row(4) == ("http", "H", "/p")


def reference_parts(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(pl.col("url").str.extract_groups(URL_PATTERN).alias("p")).select(
        pl.col("p").struct.field("1").str.to_lowercase().alias("_scheme"),
        pl.col("p").struct.field("2").alias("_host"),
        pl.col("p").struct.field("3").alias("_path"),
    )


def test_the_common_origin_shortcut_agrees_with_the_plain_pattern():
    """Most rows share one scheme://host (the shortcut); look-alikes must not take it."""
    rng = random.Random(11)
    origin = "HTTPS://Cdn.Exämple.com"
    odd = [
        None, "", origin, origin + "?q=/x", origin + "#/f", origin + "//double", origin + "/",
        origin + ".evil.org/x", origin + ":443/x", "https://Cdn.Exämple.com/lower-scheme",
        origin + "/é/ü?x#y", origin + "/a?b#c/d", "ftp://other.host/p", "not a url",
    ]  # fmt: skip
    urls = [origin + "/static/" + str(rng.randint(0, 99)) + "?v=1" for _ in range(3000)]
    urls += odd * 50
    rng.shuffle(urls)
    frame = pl.DataFrame({"url": urls}, schema={"url": pl.String})
    got = with_url_parts(frame).select("_scheme", "_host", "_path")
    assert got.equals(reference_parts(frame))
    assert with_url_parts(pl.DataFrame({"url": [origin + "/é?x"]})).row(0) == (
        origin + "/é?x",
        "https",
        "Cdn.Exämple.com",
        "/é",
    )
