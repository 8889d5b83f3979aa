"""The text of an RFC 5424 syslog message (the provider's log forwarding sends one v1 line).

``<PRI>VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID SP STRUCTURED-DATA
[SP MSG]``: the header is checked for shape (it says nothing the lake keeps: the log line
carries its own time and zone), the structured data is skipped with its quoting rules, and
MSG, less a byte order mark and a trailing line end, is the text.
"""

from __future__ import annotations

import re

_HEADER = re.compile(
    rb"<(?P<pri>\d{1,3})>(?P<version>[1-9]\d?) "
    rb"(?P<timestamp>\S+) \S{1,255} \S{1,48} \S{1,128} \S{1,32} "
)
# MSG-UTF8 starts with a byte order mark. RFC 5424's examples, and the provider's copy of
# them, write that mark as the letters "BOM"; no v1 line starts with them (field 1 is a
# cache status), so they are taken for the mark as well.
_BOMS = ("\ufeff", "BOM")


class NotSyslog(ValueError):
    """A frame or datagram that is not an RFC 5424 message with text."""


def message_text(frame: bytes) -> str:
    """The MSG part of an RFC 5424 message, as text (bytes that are not UTF-8 replaced)."""
    head = _HEADER.match(frame)
    if head is None:
        raise NotSyslog("not an RFC 5424 syslog message")
    if int(head["pri"]) > 191:
        raise NotSyslog(f"syslog priority {int(head['pri'])} is out of range")
    end = _skip_structured_data(frame, head.end())
    if end >= len(frame):
        raise NotSyslog("syslog message without text")
    if frame[end : end + 1] != b" ":
        raise NotSyslog("no space after the structured data")
    text = frame[end + 1 :].decode("utf-8", errors="replace")
    for bom in _BOMS:
        text = text.removeprefix(bom)
    text = text.removesuffix("\n").removesuffix("\r")
    if not text.strip():
        raise NotSyslog("syslog message without text")
    if "\n" in text or "\r" in text:
        raise NotSyslog("syslog text of more than one line")
    return text


def _skip_structured_data(frame: bytes, at: int) -> int:
    """Where the structured data starting at ``at`` ends: ``-``, or ``[...]`` elements whose
    quoted values may hold ``\\"``, ``\\\\`` and ``\\]``."""
    if frame[at : at + 1] == b"-":
        return at + 1
    if frame[at : at + 1] != b"[":
        raise NotSyslog("no structured data ('-' or '[...]') after the header")
    i, n = at, len(frame)
    while i < n and frame[i : i + 1] == b"[":
        i += 1
        quoted = False
        while True:
            if i >= n:
                raise NotSyslog("structured data is not closed")
            char = frame[i : i + 1]
            if quoted and char == b"\\":
                i += 2
                continue
            if char == b'"':
                quoted = not quoted
            elif char == b"]" and not quoted:
                i += 1
                break
            i += 1
    return i
