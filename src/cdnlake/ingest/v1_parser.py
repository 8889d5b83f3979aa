"""Streaming, vectorised parser of v1 day files (plain or gzip, any size).

The file is read in blocks of whole lines, so memory is bounded by the block size, not the
file. Each block is parsed with polars string kernels; every line that cannot be parsed
becomes a rejected row (line number, reason, raw text) instead of being dropped. Bytes
that are not UTF-8 are replaced (U+FFFD), so a stranger's user agent cannot sink a line.
The end user's ``Authorization`` header (field 15) is never kept, not even in the raw
text of a rejected line.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from cdnlake.errors import DamagedInputError
from cdnlake.ingest.normalize import (
    REJECT_SCHEMA,
    dash_to_null,
    future_limit_ms,
    future_reason,
    with_url_parts,
)

DEFAULT_BLOCK_BYTES = 16 << 20
KEPT_FIELDS = 14  # field 15, the end user's Authorization header, is never read
CACHE_STATUSES = ["HIT", "MISS", "BYPASS", "REVALIDATED", "STALE", "UPDATING", "EXPIRED", "-"]
REDACTED = "[redacted]"
MIN_TS_MS = 946_684_800_000  # 2000-01-01
MAX_TS_MS = 4_102_444_800_000  # 2100-01-01
RAW_CHUNK = 1 << 20  # compressed bytes read at a time from a .gz file
SALVAGE_STEP = 256  # compressed bytes fed at a time to recover what precedes corruption


@dataclass
class Block:
    first_line: int  # 1-based number of the block's first line
    data: bytes  # whole lines; the last one without newline only at end of file
    unterminated_tail: bool  # the block's last line had no newline (end of file)
    newlines: int = field(init=False)  # counted once: numbering and parsing both need it

    def __post_init__(self) -> None:
        self.newlines = self.data.count(b"\n")

    def lines(self) -> int:
        return self.newlines + (1 if self.unterminated_tail else 0)


class LogStream:
    """A log file's bytes, gunzipped when it is gzip (told by its magic bytes, not its name).

    Every byte a damaged gzip file still holds is handed out: a file cut short (a download
    that broke off) or corrupt inside ends the stream where the damage starts, and
    ``damage`` then says what was wrong, so that the caller reports the loss instead of
    taking what it read for the whole file. Concatenated gzip members are read in turn.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.damage: str | None = None
        self._raw: BinaryIO = open(path, "rb")  # noqa: SIM115
        self._gzip = self._raw.read(2) == b"\x1f\x8b"
        self._raw.seek(0)
        self._inflate = zlib.decompressobj(wbits=31)
        self._pending = b""
        self._ended = False

    def __enter__(self) -> LogStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._raw.close()

    def read(self, size: int) -> bytes:
        if not self._gzip:
            return self._raw.read(size)
        out = [self._pending]
        have = len(self._pending)
        self._pending = b""
        while have < size and not self._ended:
            piece = self._inflate_some(size - have)
            out.append(piece)
            have += len(piece)
        data = b"".join(out)
        if len(data) > size:
            data, self._pending = data[:size], data[size:]
        return data

    def _inflate_some(self, want: int) -> bytes:
        """Some decompressed bytes, or b"" once the stream has ended (whole or damaged)."""
        inflate = self._inflate
        if inflate.unconsumed_tail:
            raw = inflate.unconsumed_tail
        elif inflate.eof:
            raw = inflate.unused_data or self._raw.read(RAW_CHUNK)
            if not raw.strip(b"\x00"):  # the end, or the zero padding some tools add
                self._ended = True
                return b""
            inflate = self._inflate = zlib.decompressobj(wbits=31)  # the next member
        else:
            raw = self._raw.read(RAW_CHUNK)
            if not raw:
                self._end("the gzip stream ends early (the file was cut short)")
                return b""
        before = inflate.copy()
        try:
            return inflate.decompress(raw, max(want, RAW_CHUNK))
        except zlib.error as exc:
            return self._salvage(before, raw, exc)

    def _salvage(self, inflate: Any, raw: bytes, exc: zlib.error) -> bytes:
        """What ``raw`` still gives before its corrupt part, fed in small pieces."""
        out = []
        try:
            for at in range(0, len(raw), SALVAGE_STEP):
                out.append(inflate.decompress(raw[at : at + SALVAGE_STEP]))
        except zlib.error:
            pass
        self._end(f"the gzip stream is corrupt ({exc})")
        return b"".join(out)

    def _end(self, damage: str) -> None:
        self.damage = damage
        self._ended = True


def read_blocks(
    stream: BinaryIO | LogStream, block_bytes: int = DEFAULT_BLOCK_BYTES, first_line: int = 1
) -> Iterator[Block]:
    """Whole-line blocks of bytes; a last line without newline is flagged.

    When a damaged gzip stream ends early, the line it cut is no line of the file: it is
    left out, and the stream's ``damage`` tells the caller what came after the last whole
    line.
    """
    carry = b""
    line_no = first_line
    while True:
        chunk = stream.read(block_bytes)
        if not chunk:
            break
        cut = chunk.rfind(b"\n")
        if cut < 0:
            carry += chunk
            continue
        # One copy of the block: the carried start of its first line plus the chunk's
        # whole lines, joined through a view (a slice would copy the chunk once more).
        body = b"".join((carry, memoryview(chunk)[: cut + 1]))
        carry = chunk[cut + 1 :]
        block = Block(line_no, body, False)
        yield block
        line_no += block.newlines
    if carry and getattr(stream, "damage", None) is None:
        yield Block(line_no, carry, True)


def block_lines(block: Block) -> pl.Series:
    """The block's lines as text (NULL for an empty line), by polars' native CSV reader.

    The reader is told that fields are separated by a control character that log lines
    do not contain, so each row is one whole line. A block that does contain it, or whose
    row count does not match its line count, takes the plain Python route instead.
    """
    expected = block.lines()
    if b"\x1f" not in block.data and block.data:
        frame = pl.read_csv(
            block.data,
            has_header=False,
            separator="\x1f",
            quote_char=None,
            schema={"line": pl.String},
            truncate_ragged_lines=True,
            encoding="utf8-lossy",
            raise_if_empty=False,
        )
        if frame.height == expected:
            return frame["line"]
    text = block.data.decode("utf-8", errors="replace")
    if not block.unterminated_tail:
        text = text[:-1]
    return pl.Series("line", [line.removesuffix("\r") for line in text.split("\n")])


def _redact_raw(line: pl.Expr, n_fields: pl.Expr) -> pl.Expr:
    """Drop field 15 onwards (the Authorization header) from a raw line."""
    kept = line.str.split("|").list.head(14).list.join("|")
    return (
        pl.when(n_fields >= 15).then(pl.concat_str([kept, pl.lit("|" + REDACTED)])).otherwise(line)
    )


def _epoch_ms(text: pl.Expr) -> pl.Expr:
    """Field 3 as epoch milliseconds: 13 digits are milliseconds, 10 digits seconds.

    The provider writes milliseconds; files re-exported by some pipelines carry seconds.
    """
    value = text.str.to_integer(strict=False)
    return pl.when(text.str.len_bytes() == 10).then(value * 1000).otherwise(value)


def parse_block(
    block: Block, zone_id: int | None, *, keep_unterminated: bool = True, numbered: bool = False
) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Parse one block: (lake rows, rejected rows, blank lines). ``numbered`` rows keep
    their ``line_number`` as a last column (not a lake column: the caller drops it)."""
    frame = pl.DataFrame({"line": block_lines(block)}).with_row_index(
        "line_number", offset=block.first_line
    )
    if block.unterminated_tail and not keep_unterminated:
        frame = frame.head(frame.height - 1)
    last_line = block.first_line + frame.height - 1
    # A list split is cheaper than a fixed-width one and gives the exact field count.
    parts = pl.col("_parts")
    frame = (
        frame.with_columns(pl.col("line").str.split("|").alias("_parts"))
        .with_columns(
            parts.list.len().fill_null(0).alias("_n"),
            parts.list.to_struct(fields=[f"field_{i}" for i in range(KEPT_FIELDS)]).alias("_f"),
        )
        .drop("_parts")
    )
    # Only a line with at most one field can be blank: look for text in those few alone.
    maybe_blank = pl.when(pl.col("_n") <= 1).then(pl.col("line"))
    blank_line = (pl.col("_n") == 0) | ~maybe_blank.str.contains(r"\S").fill_null(True)
    blanks = frame.filter(blank_line)
    blank = blanks.height
    if blank:
        frame = frame.filter(~pl.col("line_number").is_in(blanks["line_number"].implode()))

    def field(i: int) -> pl.Expr:
        return pl.col("_f").struct.field(f"field_{i}")

    frame = frame.with_columns(
        field(0).alias("cache_status"),
        field(1).str.to_integer(strict=False).alias("_status"),
        _epoch_ms(field(2)).alias("_ts"),
        field(3).str.to_integer(strict=False).alias("_bytes"),
        field(4).str.to_integer(strict=False).alias("_zone"),
        field(5).alias("remote_ip"),
        field(6).alias("referer"),
        field(7).alias("url"),
        field(8).alias("edge_location"),
        field(9).alias("user_agent"),
        field(10).alias("request_id"),
        field(11).alias("country_code"),
        field(12).alias("_body"),
        field(13).alias("content_range"),
    ).pipe(with_url_parts)
    body_int = pl.col("_body").str.to_integer(strict=False)
    truncated = (pl.col("line_number") == last_line) & pl.lit(block.unterminated_tail)
    field_count = pl.format("expected 12 to 15 fields, got {}", pl.col("_n"))
    # (kind, test that fails, message): the first failing test names the line's fault;
    # the kind is what summaries count rejects by.
    rules: list[tuple[str, pl.Expr, pl.Expr]] = [
        (
            "wrong field count",
            pl.col("_n") < 12,
            pl.when(truncated)
            .then(pl.format("truncated last line: {} of 12 fields", pl.col("_n")))
            .otherwise(field_count),
        ),
        ("wrong field count", pl.col("_n") > 15, field_count),
        (
            "unknown cache status",
            ~pl.col("cache_status").is_in(CACHE_STATUSES),
            pl.format("field 1: unknown cache status '{}'", pl.col("cache_status")),
        ),
        (
            "bad status code",
            pl.col("_status").is_null() | ~pl.col("_status").is_between(100, 599),
            pl.format("field 2: bad status code '{}'", field(1)),
        ),
        (
            "bad timestamp",
            pl.col("_ts").is_null() | ~pl.col("_ts").is_between(MIN_TS_MS, MAX_TS_MS),
            pl.format("field 3: bad timestamp '{}'", field(2)),
        ),
        (
            "future timestamp",
            pl.col("_ts") > future_limit_ms(),
            pl.format("field 3: {}", future_reason(field(2))),
        ),
        (
            "bad bytes sent",
            pl.col("_bytes").is_null() | (pl.col("_bytes") < 0),
            pl.format("field 4: bad bytes sent '{}'", field(3)),
        ),
        (
            "bad pull zone id",
            pl.col("_zone").is_null(),
            pl.format("field 5: bad pull zone id '{}'", field(4)),
        ),
        (
            "other pull zone",
            pl.lit(zone_id is not None) & (pl.col("_zone") != (zone_id or 0)),
            pl.format("field 5: pull zone {} is not the imported zone", pl.col("_zone")),
        ),
        (
            "empty remote ip",
            pl.col("remote_ip").str.len_chars() == 0,
            pl.lit("field 6: empty remote ip"),
        ),
        ("not a URL", pl.col("_host").is_null(), pl.lit("field 8: not a URL")),
        (
            "bad request id",
            ~pl.col("request_id").str.contains(r"^[0-9A-Za-z_\-]{8,64}$"),
            pl.lit("field 11: bad request id"),
        ),
        (
            "bad country code",
            ~pl.col("country_code").str.contains(r"^(-|[A-Za-z]{2})$"),
            pl.format("field 12: bad country code '{}'", pl.col("country_code")),
        ),
        (
            "bad body bytes",
            (pl.col("_n") >= 13)
            & ~pl.col("_body").is_in(["-", ""])
            & (body_int.is_null() | (body_int < 0)),
            pl.format("field 13: bad body bytes '{}'", pl.col("_body")),
        ),
    ]
    # A cheap rule number for every line; the message is formatted for rejected lines only.
    first_failure: Any = pl
    for number, (_, test, _) in enumerate(rules):
        first_failure = first_failure.when(test).then(pl.lit(number, pl.Int8))
    frame = frame.with_columns(first_failure.otherwise(None).alias("_rule"))
    message: Any = pl
    kind: Any = pl
    for number, (name, _, text) in enumerate(rules):
        message = message.when(pl.col("_rule") == number).then(text)
        kind = kind.when(pl.col("_rule") == number).then(pl.lit(name))
    good = frame.filter(pl.col("_rule").is_null()).select(
        pl.from_epoch(pl.col("_ts"), time_unit="ms").dt.replace_time_zone("UTC").alias("ts"),
        pl.col("request_id"),
        pl.col("cache_status"),
        pl.col("_status").cast(pl.Int32).alias("status_code"),
        pl.col("_bytes").alias("bytes_sent"),
        pl.col("edge_location"),
        pl.col("_scheme").alias("scheme"),
        pl.col("_host").alias("host"),
        pl.when(pl.col("_path") == "").then(pl.lit("/")).otherwise(pl.col("_path")).alias("path"),
        pl.col("url"),
        pl.col("remote_ip"),
        dash_to_null("country_code").str.to_uppercase().alias("country_code"),
        dash_to_null("user_agent").alias("user_agent"),
        dash_to_null("referer").alias("referer"),
        body_int.alias("body_bytes_sent"),
        dash_to_null("content_range").alias("content_range"),
        pl.lit(None, pl.String).alias("ja4_fingerprint"),
        pl.lit(None, pl.Int32).alias("asn"),
        pl.lit(None, pl.String).alias("asn_organization"),
        pl.lit("v1").alias("source"),
        *([pl.col("line_number").cast(pl.Int64)] if numbered else []),
    )
    rejects = frame.filter(pl.col("_rule").is_not_null()).select(
        pl.col("line_number").cast(pl.Int64),
        message.otherwise(None).alias("reason"),
        _redact_raw(pl.col("line"), pl.col("_n")).alias("raw_line"),
        kind.otherwise(None).alias("kind"),
        pl.col("request_id"),
    )
    return good, rejects.cast(REJECT_SCHEMA), blank  # type: ignore[arg-type]


@dataclass
class ParseCounts:
    """What a block's frames do not show: its lines, and how many of them were blank.
    (Its rows and rejects, and the rejects' kinds, are the frames' own.)"""

    lines: int = 0
    blank: int = 0


def iter_parsed(
    path: Path,
    zone_id: int | None,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    first_line: int = 1,
    keep_unterminated: bool = True,
    numbered: bool = False,
    workers: int = 2,
) -> Iterator[tuple[pl.DataFrame, pl.DataFrame, ParseCounts]]:
    """Parse a whole file block by block, yielding (rows, rejects, counts of the block).

    Blocks are parsed ``workers`` at a time (polars releases the GIL) and yielded in file
    order; at most ``workers + 1`` blocks are in memory at once. A damaged gzip file
    yields every whole line it still holds, then raises :class:`DamagedInputError`.
    """

    def parse(block: Block) -> tuple[pl.DataFrame, pl.DataFrame, ParseCounts]:
        good, rejects, blank = parse_block(
            block, zone_id, keep_unterminated=keep_unterminated, numbered=numbered
        )
        return good, rejects, ParseCounts(good.height + rejects.height + blank, blank)

    last_line = first_line - 1
    with LogStream(path) as stream, ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque[Future[tuple[pl.DataFrame, pl.DataFrame, ParseCounts]]] = deque()
        for block in read_blocks(stream, block_bytes, first_line):
            last_line = block.first_line + block.newlines - 1
            pending.append(pool.submit(parse, block))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
        if stream.damage is not None:
            raise DamagedInputError(
                f"{path.name} is damaged: {stream.damage}; it ends after line {last_line}",
                last_line=last_line,
            )
