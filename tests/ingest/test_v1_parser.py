"""The v1 parser's own edges: field counts in messages, blocks cut inside long lines."""

from __future__ import annotations

import io

from cdnlake.ingest.v1_parser import Block, parse_block, read_blocks

TS = 1_795_132_800_000
GOOD = "HIT|200|{ts}|412|1234|163.172.53.229|-|https://cdn.example.net/a.m4v|WA|UA|{rid}|DE"


def line(i: int) -> str:
    return GOOD.format(ts=TS + i, rid=f"{i:032d}")


def parse(lines: list[str]) -> tuple[list[str], list[tuple[int, str]], int]:
    data = ("\n".join(lines) + "\n").encode()
    good, rejects, blank = parse_block(Block(1, data, False), 1234)
    return good["request_id"].to_list(), list(rejects.select("line_number", "reason").rows()), blank


def test_field_counts_in_reasons_are_exact_beyond_the_counted_sixteen():
    good, rejects, blank = parse(
        [
            line(1),  # 12 fields
            line(2) + "||",  # 14 fields, two empty: fine
            line(3) + "|1|bytes=0-1|Bearer x",  # 15 fields
            line(4) + "|1|2|3|",  # 16 fields, the 16th empty
            line(5) + "|1|2|3||||",  # 19 fields, all past 15 empty
            "|".join(line(6).split("|")[:11]),  # 11 fields
            line(7).rsplit("|", 1)[0] + "|",  # 12 fields, the last (country) empty
            "",
            "  \t",
            "x",  # one field, not blank
        ]
    )
    assert good == [f"{i:032d}" for i in (1, 2, 3)]
    assert blank == 2
    assert rejects == [
        (4, "expected 12 to 15 fields, got 16"),
        (5, "expected 12 to 15 fields, got 19"),
        (6, "expected 12 to 15 fields, got 11"),
        (7, "field 12: bad country code ''"),
        (10, "expected 12 to 15 fields, got 1"),
    ]


def test_blocks_rejoin_lines_longer_than_a_block():
    lines = [line(1), "A" * 10_000 + "|" + line(2), line(3), "tail without newline"]
    data = "\n".join(lines).encode()
    blocks = list(read_blocks(io.BytesIO(data), block_bytes=1000))
    assert b"".join(b.data for b in blocks) == data
    seen: list[tuple[int, bytes]] = []
    for block in blocks:
        for offset, text in enumerate(block.data.split(b"\n")[: block.data.count(b"\n")]):
            seen.append((block.first_line + offset, text))
        if block.unterminated_tail:
            seen.append((block.first_line + block.data.count(b"\n"), block.data.rsplit(b"\n")[-1]))
    assert seen == [(i + 1, text.encode()) for i, text in enumerate(lines)]
    assert blocks[-1].unterminated_tail and not any(b.unterminated_tail for b in blocks[:-1])
