"""The [privacy] policy: addresses, query strings and raw text as they may be stored."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from pathlib import Path

import polars as pl
import pytest

from cdnlake.config import build_config
from cdnlake.errors import ConfigError
from cdnlake.privacy import KEEP, KEEP_ALL, PrivacyPolicy, Setting, parse_address

NAMES = ("token", "expires", "token_path")
TRUNCATE = PrivacyPolicy("truncate", 24, 64, NAMES)
HASH = PrivacyPolicy("hash", 24, 64, NAMES, b"k1")


def mac(text: str, key: bytes = b"k1") -> str:
    """HMAC-SHA256 of the address's 4 or 16 bytes."""
    return hmac.new(key, ipaddress.ip_address(text).packed, hashlib.sha256).hexdigest()


ADDRESSES = [
    # (as received, truncated /24 /64, canonical text hashed: None = stored as NULL)
    ("1.2.3.4", "1.2.3.0", "1.2.3.4"),
    ("1.2.3.0", "1.2.3.0", "1.2.3.0"),  # the provider's OneDigit
    ("0.0.0.0", "0.0.0.0", None),  # the provider's Drop: kept as it is
    ("::", "::", None),
    ("255.255.255.255", "255.255.255.0", "255.255.255.255"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::", "2001:db8:1:2:3:4:5:6"),
    ("2001:DB8:0:0:0:0:0:1", "2001:db8::", "2001:db8::1"),  # any spelling: one address
    ("2001:db8:1:2::", "2001:db8:1:2::", "2001:db8:1:2::"),  # the provider's /64
    ("fe80::1%eth0", "fe80::", "fe80::1"),  # zone index dropped
    ("::ffff:9.8.7.6", "9.8.7.0", "9.8.7.6"),  # IPv4-mapped: its IPv4 address
    ("[2001:db8::7]", "2001:db8::", "2001:db8::7"),
    ("::1", "::", "::1"),
]
MALFORMED = ["bad", "", "-", "1.2.3", "256.1.1.1", "01.2.3.4", "1.2.3.4:80", "2001:db8::g"]


@pytest.mark.parametrize(("given", "truncated", "hashed"), ADDRESSES)
def test_one_address(given: str, truncated: str, hashed: str | None) -> None:
    assert TRUNCATE.stored_as(given) == truncated
    assert HASH.stored_as(given) == (mac(hashed) if hashed else given)
    assert KEEP.stored_as(given) == given
    assert PrivacyPolicy("drop").stored_as(given) is None


def test_columns_agree_with_one_address() -> None:
    given = [a for a, _, _ in ADDRESSES] + MALFORMED + [None]
    column = pl.Series("remote_ip", given, pl.String)
    for policy in (
        TRUNCATE,
        HASH,
        PrivacyPolicy("truncate", 20, 48),
        PrivacyPolicy("truncate", 0, 0),
        PrivacyPolicy("truncate", 32, 128),
        PrivacyPolicy("drop"),
    ):
        assert policy.addresses(column).to_list() == [policy.stored_as(a) for a in given]
    assert PrivacyPolicy("truncate", 20, 48).stored_as("10.1.255.9") == "10.1.240.0"


def test_truncate_of_ipv4_only_column_uses_the_same_rule() -> None:
    column = pl.Series("remote_ip", ["10.20.30.40", "10.20.30.41", "192.0.2.255"])
    assert PrivacyPolicy("truncate", 16, 64).addresses(column).to_list() == [
        "10.20.0.0",
        "10.20.0.0",
        "192.0.0.0",
    ]


@pytest.mark.parametrize("given", MALFORMED)
def test_malformed_address_is_never_stored_as_given(given: str) -> None:
    assert TRUNCATE.stored_as(given) is None
    assert HASH.stored_as(given) is None
    assert KEEP.stored_as(given) == given


def test_a_stored_hash_is_left_as_it_is() -> None:
    once = HASH.stored_as("1.2.3.4")
    assert HASH.stored_as(once) == once
    assert TRUNCATE.stored_as(once) is None  # no address: a hash cannot be truncated


def test_parse_address() -> None:
    assert str(parse_address(" ::ffff:1.2.3.4 ")) == "1.2.3.4"
    assert parse_address("nope") is None
    assert parse_address(None) is None


URLS = [
    ("https://a/b?x=1&token=abc&y=2#frag", "https://a/b?x=1&y=2#frag"),
    ("https://a/b?token=1", "https://a/b"),
    ("https://a/b?TOKEN=1&expires=2", "https://a/b"),  # names: any case
    ("https://a/b?tok%65n=1&z", "https://a/b?z"),  # percent-encoded name
    ("https://a/b?token=1&token=2&a=3&token", "https://a/b?a=3"),  # repeated
    ("https://a/b#x?token=1", "https://a/b#[token]"),  # in the fragment: held whole
    ("https://a/b?a&&token&b", "https://a/b?a&&b"),
    ("https://a/b?tokens=1&my_token=2", "https://a/b?tokens=1&my_token=2"),  # other names
    ("https://a/p?token_path=%2Fp&expires=9&q=1#t", "https://a/p?q=1#t"),
    ("https://a/b?", "https://a/b?"),
    ("https://a/b", "https://a/b"),
    ("/relative?expires=1&b=%20", "/relative?b=%20"),
    (None, None),
]


def test_query_strings() -> None:
    column = pl.Series("url", [u for u, _ in URLS], pl.String)
    assert TRUNCATE.urls(column).to_list() == [want for _, want in URLS]
    assert [TRUNCATE.strip_url(u) for u, _ in URLS] == [want for _, want in URLS]
    assert column.to_list() == [u for u, _ in URLS]  # the caller's column is untouched
    assert PrivacyPolicy(strip_query=()).urls(column).to_list() == column.to_list()


JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ2In0.c2lnbmF0dXJl_-x"
# Every signed-URL form (the provider's README, "Token authentication"): as received, as
# stored. A directory token goes with its segment: the real path stays for analytics.
SIGNED = [
    (
        "https://test.b-cdn.net/bcdn_token=DIRSECRET1&expires=1598024587"
        "&token_path=%2Fv%2F/v/seg.ts",
        "https://test.b-cdn.net/v/seg.ts",
    ),
    ("/bcdn_token=DIRSECRET1&expires=1&token_path=%2Fv%2F/v/seg.ts", "/v/seg.ts"),
    (  # every parameter the provider names, in another order
        "https://h/bcdn_token=DIRSECRET1&token_countries=DE,FR&token_countries_blocked=US"
        "&expires=9&token_path=%2F/v/i.m3u8?x=1",
        "https://h/v/i.m3u8?x=1",
    ),
    ("https://h/expires=9&bcdn_token=DIRSECRET1/v/seg.ts", "https://h/v/seg.ts"),
    ("https://h/BCDN_TOKEN=DIRSECRET1&EXPIRES=9/v/seg.ts", "https://h/v/seg.ts"),  # any case
    (  # the whole segment percent-encoded, and encoded twice
        "https://h/bcdn_token%3DDIRSECRET1%26expires%3D9%26token_path%3D%252Fv%252F/v/seg.ts",
        "https://h/v/seg.ts",
    ),
    ("https://h/bcdn%5Ftoken%253DDIRSECRET1/v/seg.ts", "https://h/v/seg.ts"),
    ("https://h/bcdn_token=DIRSECRET1&expires=9&token_path=/v//v/seg.ts", "https://h/v//v/seg.ts"),
    ("/bcdn_token=DIRSECRET1", "/"),
    ("https://h/v/seg.ts?x=1;token=QSECRET2", "https://h/v/seg.ts?x=1"),  # ";" parameters
    ("https://h/a?token=QSECRET2;x=1&expires=9;y", "https://h/a?x=1;y"),
    ("https://h/a?x=1;tok%65n=QSECRET2", "https://h/a?x=1"),
    ("https://h/v/seg.ts;token=QSECRET2;q=1?x=1", "https://h/v/seg.ts;q=1?x=1"),  # matrix
    (f"https://h/a?auth={JWT}&x=1", "https://h/a?auth=[token]&x=1"),  # bearer tokens
    (f"https://h/{JWT}/v/seg.ts", "https://h/[token]/v/seg.ts"),
    ("https://h/a?sig=HS256-SECRETx_Y-z==&x=1", "https://h/a?sig=[token]&x=1"),
    ("https://h/hs256-SECRETx/v/seg.ts", "https://h/[token]/v/seg.ts"),
    ("https://h/a?token=HS256-SECRETx&x=1", "https://h/a?x=1"),
    # Fail closed: a signed URL inside a value, a segment or fragment that hides one.
    ("https://h/a?next=https://x/?token=QSECRET2&y=1", "https://h/a?y=1"),
    ("https://h/a?next=https%3A%2F%2Fx%2F%3Ftoken%3DQSECRET2&y=1", "https://h/a?y=1"),
    ("https://h/x%3Btoken%3DQSECRET2/v", "https://h/[token]/v"),
    ("https://h/%2525252525252541/v?x", "https://h/[token]/v?x"),  # does not decode
    ("https://h/v#access&token=QSECRET2", "https://h/v#[token]"),
    # Left as they are: nothing signs them.
    ("https://h/v/seg.ts?a=b=c&d", "https://h/v/seg.ts?a=b=c&d"),
    ("https://h/q=1/tokens=2/my_token=3", "https://h/q=1/tokens=2/my_token=3"),
    ("https://h/api/token/refresh?eyJ=1", "https://h/api/token/refresh?eyJ=1"),
    ("https://h/a%20b;v=2", "https://h/a%20b;v=2"),
]


def path_of(url: str) -> str:
    """A URL's path, as a log's ``path`` holds it (no query, no fragment)."""
    rest = url.split("://", 1)[1].partition("/")[2] if "://" in url else url.lstrip("/")
    return "/" + rest.partition("#")[0].partition("?")[0]


@pytest.mark.parametrize(("given", "stored"), SIGNED)
def test_every_signed_url_form(given: str, stored: str) -> None:
    assert TRUNCATE.strip_url(given) == stored
    assert TRUNCATE.urls(pl.Series("url", [given, "https://h/x"])).to_list() == [
        stored,
        "https://h/x",
    ]
    # Any [privacy] that scrubs URLs at all removes the provider's signing parameters.
    assert PrivacyPolicy(strip_query=("sig",)).strip_url(given) == stored.replace(
        "sig=[token]&", ""
    )
    assert PrivacyPolicy(strip_query=()).strip_url(given) == given  # URLs kept whole


def test_signed_urls_in_every_column_and_raw_text() -> None:
    """``url``, ``path`` and ``referer`` of a row, a v1 line's URL and referer, a v2
    record's ``url`` and ``path``, a shield event's labels and free text: no token left."""
    secrets = ("DIRSECRET1", "QSECRET2", "SECRETx", JWT)
    frame = pl.DataFrame(
        {
            "url": [u for u, _ in SIGNED],
            "path": [path_of(u) for u, _ in SIGNED],
            "referer": [u for u, _ in reversed(SIGNED)],
        }
    )
    out = TRUNCATE.rows(frame)
    assert out["url"].to_list() == [s for _, s in SIGNED]
    assert out["path"].to_list() == [path_of(s) for _, s in SIGNED]
    for column in out.iter_columns():
        assert not [v for v in column.to_list() if any(s in v for s in secrets)]
    texts = [
        "|".join(["HIT", "200", "1700000000000", "1", "7", "1.2.3.4", referer, url, "DE"])
        + "|UA|abcdef12345|DE"
        for (url, _), (referer, _) in zip(SIGNED, reversed(SIGNED), strict=True)
    ]
    texts += [json.dumps({"url": u, "path": u, "remoteIp": "1.2.3.4"}) for u, _ in SIGNED]
    texts += [json.dumps({"labels": {"uri": u}}) for u, _ in SIGNED]  # shield labels
    texts += [f"blocked GET {u} from 1.2.3.4 (rule 7)" for u, _ in SIGNED]
    texts += ["cut off|" + u[: len(u) // 2 + 8] for u, _ in SIGNED]  # a line cut short
    for text in texts:
        for policy in (TRUNCATE, HASH, PrivacyPolicy(strip_query=NAMES)):
            scrubbed = policy.scrub_text(text) or ""
            assert not [s for s in secrets if s in scrubbed], (text, scrubbed)
    v1 = TRUNCATE.scrub_text(texts[0]) or ""
    assert v1.split("|")[7] == SIGNED[0][1] and v1.split("|")[6] == SIGNED[-1][1]


def test_rows_leave_request_id_and_path() -> None:
    frame = pl.DataFrame(
        {
            "request_id": ["1.2.3.4", "tok"],
            "path": ["/a", "/b"],
            "url": ["https://h/a?token=s", "https://h/b?x=1"],
            "referer": ["https://h/?expires=1", None],
            "remote_ip": ["1.2.3.4", "2001:db8::1"],
        }
    )
    out = TRUNCATE.rows(frame)
    assert out["request_id"].to_list() == ["1.2.3.4", "tok"]
    assert out["path"].to_list() == ["/a", "/b"]
    assert out["url"].to_list() == ["https://h/a", "https://h/b?x=1"]
    assert out["referer"].to_list() == ["https://h/", None]
    assert out["remote_ip"].to_list() == ["1.2.3.0", "2001:db8::"]
    assert KEEP.rows(frame) is frame


V1_LINE = (
    "HIT|200|1700000000000|512|7|203.0.113.77|https://ref/?token=r|"
    "https://h/a?token=SECRET&x=1|DE|UA 198.51.100.9|abcdef12345|DE"
)


def test_v1_raw_line() -> None:
    out = TRUNCATE.scrub_text(V1_LINE)
    fields = out.split("|")
    assert fields[5] == "203.0.113.0"
    assert fields[7] == "https://h/a?x=1"
    assert fields[6] == "https://ref/"
    assert "198.51.100.9" not in out and "SECRET" not in out
    assert fields[10] == "abcdef12345"
    hashed = HASH.scrub_text(V1_LINE)
    assert hashed.split("|")[5] == mac("203.0.113.77")
    bad_ip = V1_LINE.replace("203.0.113.77", "garbage")
    assert TRUNCATE.scrub_text(bad_ip).split("|")[5] == "-"


def test_v2_raw_record() -> None:
    record = {
        "remoteIp": "2001:db8:5:6:7:8:9:a",
        "url": "https://h/a?expires=9&token=SECRET",
        "timestamp": "12:30:45",
        "requestId": "abc",
    }
    out = TRUNCATE.scrub_text(json.dumps(record))
    back = json.loads(out)
    assert back["remoteIp"] == "2001:db8:5:6::"
    assert back["url"] == "https://h/a"
    assert back["timestamp"] == "12:30:45" and back["requestId"] == "abc"
    assert json.loads(PrivacyPolicy("drop").scrub_text(json.dumps(record)))["remoteIp"] is None
    # A forwarded JSON message may spell its fields as the management API does.
    other = {"RemoteIp": "garbage", "Url": "https://h/?token=S&a=1"}
    assert json.loads(TRUNCATE.scrub_text(json.dumps(other))) == {
        "RemoteIp": None,
        "Url": "https://h/?a=1",
    }


@pytest.mark.parametrize(
    "text",
    [
        "cut|off 203.0.113.77 ?token=SECRET&b=1",
        '{"remoteIp": "203.0.113.77", "url": "https://h/?token=SECRET", broken',
        "x token=SECRET y [2001:db8::77] z ::ffff:203.0.113.77",
        "TOKEN=SECRET&tok%65n=SECRET2 at https://h/?tok%65n=SECRET3",
        "octets 010.001.002.003 time 12:30:45",
    ],
)
def test_unparsed_text_is_scrubbed_conservatively(text: str) -> None:
    for policy in (TRUNCATE, HASH, PrivacyPolicy("drop", strip_query=NAMES)):
        out = policy.scrub_text(text)
        assert out is not None
        for secret in ("203.0.113.77", "2001:db8::77", "SECRET", "010.001.002.003"):
            assert secret not in out, (policy.ip, out)
    assert "12:30:45" in TRUNCATE.scrub_text(text) or "12:30:45" not in text


def test_texts_column() -> None:
    column = pl.Series("raw_line", [V1_LINE, None, V1_LINE], pl.String)
    out = TRUNCATE.texts(column).to_list()
    assert out[0] == out[2] == TRUNCATE.scrub_text(V1_LINE) and out[1] is None


def test_setting_codes() -> None:
    assert KEEP.setting == KEEP_ALL and KEEP_ALL.code() == 0
    for policy in (TRUNCATE, HASH, PrivacyPolicy("drop"), PrivacyPolicy(strip_query=NAMES)):
        assert Setting.decode(policy.setting.code()) == policy.setting
    assert HASH.setting.key_id != PrivacyPolicy("hash", key=b"k2").setting.key_id
    assert HASH.setting.cannot_become(TRUNCATE.setting) is not None
    other_key = PrivacyPolicy("hash", strip_query=NAMES, key=b"k2").setting
    assert "another key" in (HASH.setting.cannot_become(other_key) or "")
    assert TRUNCATE.setting.cannot_become(HASH.setting) is None
    assert KEEP_ALL.reaches(TRUNCATE.setting) and TRUNCATE.setting.reaches(TRUNCATE.setting)
    assert PrivacyPolicy("truncate", 28, 96).setting.reaches(TRUNCATE.setting)
    assert not PrivacyPolicy("truncate", 16, 64).setting.reaches(TRUNCATE.setting)
    assert not TRUNCATE.setting.reaches(KEEP_ALL) and TRUNCATE.setting.reaches(HASH.setting)
    assert not HASH.setting.reaches(PrivacyPolicy("hash", key=b"k2").setting)
    assert "truncated to /24" in TRUNCATE.describe()


def config(privacy: dict[str, object], env: dict[str, str] | None = None) -> PrivacyPolicy:
    built = build_config({"privacy": privacy}, base_dir=Path("/tmp"), env=env or {})
    return PrivacyPolicy.from_config(built.privacy)


def test_config_defaults_and_hash_key() -> None:
    policy = config({})
    assert policy.ip == "keep" and policy.strip_query == NAMES
    hashed = config({"ip": "hash", "hash_key_env": "MY_KEY"}, {"MY_KEY": "k1"})
    assert hashed.stored_as("1.2.3.4") == mac("1.2.3.4")
    overridden = config({}, {"CDNLAKE_PRIVACY_IP": "truncate", "CDNLAKE_PRIVACY_STRIP_QUERY": ""})
    assert overridden.ip == "truncate" and overridden.strip_query == ()
    assert repr(hashed).count("k1") == 0  # the key never shows itself


@pytest.mark.parametrize(
    ("privacy", "env", "message"),
    [
        ({"ip": "mask"}, {}, "privacy.ip: expected one of 'keep', 'truncate'"),
        ({"ipv4_prefix": 33}, {}, "privacy.ipv4_prefix: must be at most 32"),
        ({"ipv6_prefix": -1}, {}, "privacy.ipv6_prefix: must be at least 0"),
        ({"ip": "hash"}, {}, 'privacy.hash_key_env: ip = "hash" needs the NAME'),
        ({"ip": "hash", "hash_key_env": "MY_KEY"}, {}, "environment variable MY_KEY is not set"),
        (
            {"ip": "hash", "hash_key_env": "MY_KEY"},
            {"MY_KEY": ""},
            "environment variable MY_KEY is not set",
        ),
        ({"hash_key": "x"}, {}, "privacy.hash_key: secrets must not be written"),
        ({"strip_query": ["a&b"]}, {}, "privacy.strip_query[0]: expected a query parameter"),
    ],
)
def test_config_errors(privacy: dict[str, object], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(privacy, env)
    text = str(caught.value)
    assert message in text and "\n" not in text
    assert "k1" not in text


def test_column_and_one_by_one_agree_on_random_urls() -> None:
    import random

    rng = random.Random(40)
    pieces = ["token", "TOKEN", "expires", "token_path", "tok%65n", "x", "tokens", "a%20b", ""]
    pieces += ["bcdn_token", "x;token", JWT, "HS256-abc", "n=https://x/?token"]
    paths = ["/p", "/bcdn_token=s&expires=1&token_path=%2Fp%2F/p", "/BCDN_TOKEN%3Ds/p", "/a=1/p"]
    urls = []
    for _ in range(3000):
        params = [
            rng.choice(pieces) + rng.choice(["", "=", "=1", "=a=b", "=%2F"])
            for _ in range(rng.randint(0, 5))
        ]
        query = ("?" + "&".join(params)) if rng.random() < 0.9 else ""
        fragment = rng.choice(["", "", "#f", "#f?token=1"])
        urls.append(f"https://h{rng.choice(paths)}{query}{fragment}")
    column = pl.Series("url", urls)
    assert TRUNCATE.urls(column).to_list() == [TRUNCATE.strip_url(u) for u in urls]


def test_the_fast_address_reader_and_writer_agree_with_ipaddress() -> None:
    import random

    from cdnlake.privacy import address_text, packed_address

    rng = random.Random(64)
    for _ in range(20_000):
        if rng.random() < 0.5:
            groups = [rng.choice([0, 0, 0, 1, rng.getrandbits(16)]) for _ in range(8)]
            packed = b"".join(g.to_bytes(2, "big") for g in groups)
        else:
            size = rng.choice([4, 16])
            packed = bytes(rng.choice([0, 0, 255, rng.getrandbits(8)]) for _ in range(size))
        address = ipaddress.ip_address(packed)
        if address.version == 6 and address.ipv4_mapped is not None:
            assert packed_address(str(address)) == address.ipv4_mapped.packed
            continue
        assert address_text(packed) == str(address)
        assert packed_address(str(address)) == packed
        assert packed_address(str(address).upper()) == packed


def test_raw_text_with_nothing_to_treat_is_kept_byte_for_byte() -> None:
    record = '{"logId": "x",  "n": 1e5, "log": "blocked /login"}'
    assert TRUNCATE.scrub_text(record) == record
    line = "HIT|200|1700000000000|512|7|1.2.3.0|-|https://h/a?x=1|DE|UA|abcdef12345|DE"
    assert TRUNCATE.scrub_text(line) == line


def test_marks_say_what_the_rows_were_stored_under() -> None:
    from cdnlake.lake.log.progress import (
        PRIVACY,
        PRIVACY_MIXED,
        WATERMARK,
        describe_stored,
        privacy_applied,
        privacy_marks,
        stored_settings,
    )

    marks: dict[str, int] = {}
    assert stored_settings(marks.get) == [] and describe_stored(marks.get) == "no rows"
    marks[WATERMARK] = 1  # rows from before [privacy]: as received
    assert describe_stored(marks.get) == "ip keep, URLs whole"
    at = 1_795_000_000_000  # 2026-11-18 11:06:40 UTC
    marks.update(privacy_marks(marks.get, TRUNCATE.setting.code(), at))
    assert stored_settings(marks.get) == [TRUNCATE.setting, KEEP_ALL]
    assert describe_stored(marks.get) == (
        "ip truncate /24 /64, query parameters removed; "
        "mixed: older rows ip keep, URLs whole until 2026-11-18 11:06Z"
    )
    marks.update(privacy_marks(marks.get, TRUNCATE.setting.code(), at + 1))  # same setting
    assert marks[PRIVACY_MIXED] == at  # the change is dated once
    marks.update(privacy_marks(marks.get, HASH.setting.code(), at + 2))  # another change
    assert stored_settings(marks.get) == [HASH.setting, KEEP_ALL]  # the oldest kept
    marks.update(privacy_applied(HASH.setting, marks.get))
    assert stored_settings(marks.get) == [HASH.setting]
    # Stored under truncate, then hashed: keyed hashes of networks, and said so.
    truncated = {PRIVACY: TRUNCATE.setting.code(), WATERMARK: 1}
    truncated.update(privacy_applied(HASH.setting, truncated.get))
    (networks,) = stored_settings(truncated.get)
    assert networks.holds_networks and networks.key_id == HASH.setting.key_id
    assert "ip keyed hashes of /24 (IPv4) and /64 (IPv6) networks" in describe_stored(truncated.get)
    assert not networks.reaches(HASH.setting)  # the addresses are not known any more
    assert networks.cannot_become(HASH.setting) is None


def test_rows_stored_before_signed_paths_were_scrubbed_are_pending() -> None:
    """A setting that removed query parameters only (``url_rules`` 0, what lakes stored
    before every signed-URL form was scrubbed) is not the one configured now: ``status``
    says so and ``maintain --apply-privacy`` rewrites those rows."""
    from cdnlake.lake.log.progress import PRIVACY, WATERMARK
    from cdnlake.lake.personal.apply_privacy import _mixed

    now = TRUNCATE.setting
    assert now.url_rules == 1 and Setting.decode(now.code()) == now
    older = Setting.decode(now.code() & ~(1 << 62))
    assert older.url_rules == 0 and not older.same_as(now)
    assert older.describe() == "ip truncate /24 /64, query parameters removed (signed paths whole)"
    assert PrivacyPolicy().setting.url_rules == 0  # URLs whole: nothing to scrub
    marks = {WATERMARK: 1, PRIVACY: older.code()}
    assert _mixed(marks.get, TRUNCATE)
    assert not _mixed({WATERMARK: 1, PRIVACY: now.code()}.get, TRUNCATE)


V6 = "2001:db8::7"
TOKENS = [
    # (free text, what address_tokens reads in it: each address as parse_address spells
    # it, None for a run that may be one but does not parse)
    ("client 203.0.113.7 blocked", ["203.0.113.7"]),
    ("2001:db8::7", [V6]),
    ("2001:DB8::7", [V6]),  # upper case
    ("2001:0db8:0000:0000:0000:0000:0000:0007", [V6]),  # expanded, leading zeros
    ("2001:db8:0:0:0:0:0:7", [V6]),
    ("2001:DB8:0::0007", [V6]),  # half compressed
    ("::ffff:203.0.113.7", ["203.0.113.7"]),  # IPv4-mapped: its IPv4 address
    ("::FFFF:CB00:7107", ["203.0.113.7"]),  # the same, in hex
    ("0:0:0:0:0:ffff:203.0.113.7", ["203.0.113.7"]),
    ("[2001:db8::7]:443", [V6]),  # bracketed, with a port
    ("fe80::7%eth0 up", ["fe80::7"]),  # a zone index
    ("[fe80::7%25eth0]:8080", ["fe80::7"]),  # percent-encoded zone index
    ("https://[2001:db8::7]:8443/a?b=1", [V6]),
    ("https://203.0.113.7:8080/a", ["203.0.113.7"]),
    ("/x?ip=2001%3Adb8%3A%3A7&y=1", [V6]),  # percent-encoded colons
    ('{"ip":"2001:db8::7","n":1}', [V6]),
    ("'203.0.113.7',", ["203.0.113.7"]),
    ("(2001:db8::7).", [V6]),
    ("from 2001:db8::7: denied", [V6]),  # a colon after it
    ("ip:2001:db8::7", [V6]),  # a label before it
    ("010.001.002.003", ["10.1.2.3"]),  # padded octets: decimal
    ("a 1.2.3.4 b ::1 c", ["1.2.3.4", "::1"]),
    # no address
    ("version 1.2.3", []),
    ("v1.2.3.4.5", []),
    ("1.2.3.4567", []),
    ("at 12:34:56", []),
    ("2026-12-05T12:34:56.789Z", []),
    ("12:34:56:789", []),
    ("mac 00:1a:2b:3c:4d:5e", []),
    ("std::vector<int>", []),
    ("ratio 16:9, sha256:abcdef", []),
    # may be an address, does not parse: personal all the same
    ("999.1.2.3", [None]),
    ("2001:db8::7::1", [None]),
    ("2001:db8:1:2:3:4:5:6:7", [None]),  # nine groups
    ("2001:db8::12345", [None]),
    ("::ffff:999.1.2.3", [None]),
]


@pytest.mark.parametrize(("text", "held"), TOKENS)
def test_one_reading_of_addresses_in_free_text(text: str, held: list[str | None]) -> None:
    """address_tokens (the one definition scrubbing, forget and the erasure filter read
    free text with) finds an address by its parsed value however it is written; scrubbing
    leaves none of it (``-`` where it does not parse) and text without one byte for byte."""
    from cdnlake.privacy import address_tokens, addresses_in

    found = address_tokens(text)
    assert [t.address.compressed if t.address else None for t in found] == held
    assert addresses_in(text) == [a for a in held if a is not None]
    if not held:
        for policy in (TRUNCATE, HASH, PrivacyPolicy("drop")):
            assert policy.scrub_text(text) == text
        return
    truncated = TRUNCATE.scrub_text(text) or ""
    assert addresses_in(truncated) == [TRUNCATE.stored_as(a) for a in held if a is not None]
    hashed = HASH.scrub_text(text) or ""
    assert addresses_in(hashed) == []
    assert all(mac(a) in hashed for a in held if a is not None)
    dropped = PrivacyPolicy("drop").scrub_text(text) or ""
    assert addresses_in(dropped) == []
    policies = (TRUNCATE, HASH, PrivacyPolicy("drop"))
    for policy, policy_out in zip(policies, (truncated, hashed, dropped), strict=True):
        assert policy.scrub_text(policy_out) == policy_out  # stored text stays as stored
        for token in found:
            assert text[token.start : token.end] not in policy_out, policy_out
        if None in held:
            assert "-" in policy_out


def test_addresses_column_reads_each_value_once_and_keeps_nulls_empty() -> None:
    from cdnlake.privacy import addresses_column

    column = pl.Series("log", ["a 2001:DB8::7", None, "none", "a 2001:DB8::7"])
    assert addresses_column(column).to_list() == [[V6], [], [], [V6]]
