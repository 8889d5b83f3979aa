"""RFC 6587 framing and RFC 5424 text: the pieces the receiver is made of."""

from __future__ import annotations

import pytest

from cdnlake.forwarding.framing import Deframer
from cdnlake.forwarding.syslog import NotSyslog, message_text
from tests.sessions import session_for

LINE = (
    "HIT|200|1507167062421|412|390|163.172.53.229|-|https://bunnycdn.b-cdn.net/a.m4v|WA|"
    "Mozilla/5.0 (Windows NT 10.0) AppleWebKit/537.36|322b688bd63fb63f2babe9de30a5d262|DE"
)
# The issue's example: RFC 5424 writes the byte order mark as the letters "BOM".
EXAMPLE = (
    "<165>1 2021-01-01T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 "
    'iut="3" eventSource="BunnyCDN" eventID="1011"] BOM' + LINE
).encode()


def octets(message: bytes) -> bytes:
    return str(len(message)).encode() + b" " + message


def test_octet_counted_and_newline_frames_mix_and_split_anywhere():
    stream = octets(b"<1>1 - - - - - - one") + b"<1>1 - - - - - - two\r\n" + octets(b"3 x\n y")
    for step in (1, 2, 7, len(stream)):
        deframer = Deframer()
        frames = []
        for at in range(0, len(stream), step):
            frames += deframer.feed(stream[at : at + step])
        assert frames == [b"<1>1 - - - - - - one", b"<1>1 - - - - - - two", b"3 x\n y"]
        assert deframer.pending == 0 and deframer.error is None


def test_an_oversized_frame_ends_the_stream_after_the_frames_before_it():
    deframer = Deframer(max_frame=100)
    assert deframer.feed(b"<1>1 ok\n" + b"101 " + b"x" * 101) == [b"<1>1 ok"]
    assert deframer.error is not None and "101 bytes" in str(deframer.error)
    assert deframer.feed(b"<1>1 after\n") == []  # nothing after it is framed
    unterminated = Deframer(max_frame=100)
    assert unterminated.feed(b"a" * 100) == []
    assert unterminated.error is None
    assert unterminated.feed(b"aa") == [] and unterminated.error is not None
    digits = Deframer(max_frame=100)
    assert digits.feed(b"123456789012") == [] and digits.error is not None


def test_garbage_is_a_frame_of_its_own():
    assert Deframer().feed(b"12ab junk\nhello\n\n") == [b"12ab junk", b"hello"]


def test_the_text_of_the_issues_example_is_the_v1_line():
    assert message_text(EXAMPLE) == LINE
    assert message_text(EXAMPLE.replace(b"BOM", b"\xef\xbb\xbf")) == LINE
    assert message_text(b"<13>1 - - - - - - " + LINE.encode() + b"\n") == LINE
    quoted = b'<13>1 - h a 1 m [id@1 k="a \\"]\\" [x" q="\\\\"][b@2] ' + LINE.encode()
    assert message_text(quoted) == LINE


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"hello world", "not an RFC 5424"),
        (b"<999>1 - - - - - - x", "priority 999"),
        (b"<13>1 - - - - - x", "structured data"),
        (b'<13>1 - - - - - [a@1 k="v] x', "not closed"),
        (b"<13>1 - - - - - -", "without text"),
        (b"<13>1 - - - - - -    ", "without text"),
        (b"<13>1 - - - - - -x", "no space"),
        (b"<13>1 - - - - - - one\ntwo", "more than one line"),
    ],
)
def test_what_is_not_syslog_with_text_is_named(frame, reason):
    with pytest.raises(NotSyslog, match=reason):
        message_text(frame)


def test_allow_takes_ipv4_mapped_addresses_and_defaults_to_loopback(tmp_path):
    from cdnlake.config import load_config
    from cdnlake.forwarding.receiver import Receiver

    def receiver(allow: str) -> Receiver:
        path = tmp_path / "config.toml"
        path.write_text(
            f'[forwarding]\nlisten = "127.0.0.1:0"\nallow = {allow}\n'
            '[storage]\nroot = "data"\n[[zones]]\nid = 1\n'
        )
        return Receiver(load_config(path, env={}), session_for(load_config(path, env={})))

    loopback = receiver("[]")
    assert loopback.allowed("127.0.0.1") and loopback.allowed("::1")
    assert loopback.allowed("::ffff:127.0.0.1")
    assert not loopback.allowed("10.1.2.3") and not loopback.allowed("not an address")
    office = receiver('["10.0.0.0/8", "2001:db8::/32"]')
    assert office.allowed("10.1.2.3") and office.allowed("::ffff:10.9.9.9")
    assert office.allowed("2001:db8::5") and not office.allowed("127.0.0.1")
