"""Every management endpoint: success and error shapes over sockets, limits, paging."""

from __future__ import annotations

import dataclasses
from datetime import UTC, timedelta

import msgspec
import pytest

from cdnlake.client import ApiClient, CdnApi
from cdnlake.client.dns import DnsRecordType
from cdnlake.client.error_bodies import (
    ContainerNodeError,
    FieldError,
    GenericRequestResponse,
    ProblemDetails,
    StatusCodeResult,
)
from cdnlake.client.shield import (
    ReviewActionType,
    ShieldEventLogPage,
    UpdateReviewTriggeredRuleRequest,
    decode_events,
)
from cdnlake.config import ApiConfig, Secret
from cdnlake.errors import (
    ApiError,
    ForbiddenError,
    NotFoundError,
    RequestValidationError,
    UnauthorizedError,
)
from tests.conftest import FAST_RETRY, KEY, NOW, start_emulator


@pytest.fixture(scope="module")
def emu():
    e = start_emulator("1234")
    yield e
    e.stop()


def cdn(emu, key: str | None = KEY) -> CdnApi:
    api = ApiConfig(
        base_url=emu.url,
        video_url=emu.url,
        logging_url=emu.url,
        access_key=Secret(key) if key else None,
    )
    return CdnApi(ApiClient(api, retry=FAST_RETRY))


# -- shield ----------------------------------------------------------------------------
def test_review_success_and_refusals(emu):
    c = cdn(emu)
    ok = c.shield.review_triggered_rule(5001, {"ruleId": "941100", "action": 2})
    assert ok.success and ok.errorResponse.statusCode == 200
    assert emu.management.state.reviews[(5001, "941100")] == ReviewActionType.DisableRule
    typed = UpdateReviewTriggeredRuleRequest(ruleId="930100", action=ReviewActionType.LogOnly)
    assert c.shield.review_triggered_rule(5001, typed).success
    with pytest.raises(ApiError) as info:
        c.shield.review_triggered_rule(5001, {"ruleId": "000000", "action": 0})
    assert isinstance(info.value.details, GenericRequestResponse)
    assert info.value.code == "rule_not_found"
    with pytest.raises(UnauthorizedError) as info:
        cdn(emu, None).shield.review_triggered_rule(5001, {"ruleId": "941100", "action": 0})
    assert isinstance(info.value.details, StatusCodeResult) and info.value.details.statusCode == 401


@pytest.mark.parametrize(
    ("request_body", "field"),
    [
        ({"ruleId": "941100", "action": 3}, "action"),
        ({"ruleId": "941100", "action": -1}, "action"),
        ({"ruleId": "941100", "action": 0, "extra": 1}, "extra"),
    ],
)
def test_review_limits_are_checked_before_sending(emu, request_body, field):
    before = len(emu.management.state.reviews)
    with pytest.raises(RequestValidationError) as info:
        cdn(emu).shield.review_triggered_rule(5001, request_body)
    assert info.value.field == field
    assert len(emu.management.state.reviews) == before


def test_review_actions_edge_values_accepted(emu):
    for action in (0, 2):
        result = cdn(emu).shield.review_triggered_rule(5002, {"ruleId": "913100", "action": action})
        assert result.success is True
        assert emu.management.state.reviews[(5002, "913100")] == action


def test_api_validation_spec(emu):
    spec = """openapi: 3.0.0
info:
  title: Shop
  version: "1"
paths:
  /items:
    get:
      summary: list
    post:
      summary: add
  /items/{id}:
    delete:
      summary: remove
"""
    result = cdn(emu).shield.update_api_validation_spec(5001, spec, True)
    assert result.data.configuration.shieldZoneId == 5001
    assert result.data.configuration.title == "Shop"
    pairs = {(e.requestMethod, e.requestPath) for e in result.data.endpoints}
    assert pairs == {("GET", "/items"), ("POST", "/items"), ("DELETE", "/items/{id}")}
    assert all(e.validateAuthorization for e in result.data.endpoints)
    with pytest.raises(ApiError) as info:
        cdn(emu).shield.update_api_validation_spec(5001, "not: an api")
    assert isinstance(info.value.details, ProblemDetails) and info.value.details.status == 400
    with pytest.raises(NotFoundError) as info:
        cdn(emu).shield.update_api_validation_spec(4040, spec)
    assert isinstance(info.value.details, ProblemDetails)
    with pytest.raises(RequestValidationError):
        cdn(emu).shield.update_api_validation_spec(5001, "   ")


def test_upload_scanning_metrics_and_enums(emu):
    metrics = cdn(emu).shield.upload_scanning_metrics(5001)
    assert metrics.data.totalLoggedRequests > 0 and metrics.data.totalFilesScanned > 0
    with pytest.raises(NotFoundError) as info:
        cdn(emu).shield.upload_scanning_metrics(4040)
    assert isinstance(info.value.details, StatusCodeResult)
    enums = cdn(emu).shield.waf_enums()
    assert {e.enumName for e in enums.data} >= {"WafRuleAction", "WafVariable"}
    assert enums.data[1].enumValues[1].supportedValues.values
    with pytest.raises(ForbiddenError) as info:
        cdn(emu, "wrong").shield.waf_enums()
    assert isinstance(info.value.details, StatusCodeResult)


def test_event_logs_walk_every_token(emu):
    day = (NOW - timedelta(days=1)).date()
    pages = list(cdn(emu).shield.iter_event_logs(5001, day))
    assert len(pages) >= 3
    logs = [log for page in pages for log in decode_events(page)[0]]
    assert all(not decode_events(page)[1] for page in pages)
    assert len(logs) == len({log.logId for log in logs}) == emu.management.fx.events_per_day
    assert set(logs[0].labels) == {
        "asn",
        "country",
        "ruleId",
        "severity",
        "method",
        "ruleGroup",
        "status",
        "serverZone",
    }
    # The first page is asked for without a token; the last page's token is "".
    same = cdn(emu).shield.event_logs(5001, day.strftime("%m-%d-%Y"))
    assert decode_events(same) == decode_events(pages[0])
    assert pages[-1].continuationToken == "" and not pages[-1].hasMoreData
    for made_up in ("not-a-token", "0"):
        with pytest.raises(ApiError) as info:
            cdn(emu).shield.event_logs(5001, day, made_up)
        assert isinstance(info.value.details, ProblemDetails)


def test_an_event_that_does_not_decode_costs_itself_not_its_page():
    body = (
        b'{"logs": [{"logId": "a", "timestamp": 1763596800000, "labels": {"asn": "3320"}},'
        b' {"logId": "b", "timestamp": "noon"}, {"timestamp": 1}, 7,'
        b' {"logId": "e", "timestamp": -5}], "hasMoreData": false}'
    )
    page = msgspec.json.decode(body, type=ShieldEventLogPage)
    events, bad = decode_events(page)
    assert [e.logId for e in events] == ["a"] and events[0].labels == {"asn": "3320"}
    assert [(b.index, b.log_id) for b in bad] == [(1, "b"), (2, None), (3, None), (4, "e")]
    assert bad[0].reason == "Expected `int`, got `str` - at `$.timestamp`"
    assert bad[0].text == '{"logId": "b", "timestamp": "noon"}'
    assert "logId" in bad[1].reason and bad[2].text == "7"


def test_event_logs_of_a_day_without_events_are_null_and_empty(emu):
    future = (NOW + timedelta(days=1)).date()  # nothing has happened yet
    (page,) = cdn(emu).shield.iter_event_logs(5001, future)
    assert page.logs is None and page.continuationToken == ""


@pytest.mark.parametrize("bad", ["2026-11-20", "13-01-2026", "02-30-2026", "1-2-2026"])
def test_event_log_date_must_be_mm_dd_yyyy(emu, bad):
    with pytest.raises(RequestValidationError) as info:
        cdn(emu).shield.event_logs(5001, bad)
    assert info.value.field == "date"


# -- compute ---------------------------------------------------------------------------
def test_secrets_added_updated_and_never_echoed(emu):
    c = cdn(emu)
    added = c.compute.add_script_secret(3001, "API_TOKEN", "s3cret-value")
    assert added.Name == "API_TOKEN" and added.Id > 0
    updated = c.compute.update_script_secret(3001, added.Id, "x" * 4096)
    assert updated.Id == added.Id and updated.LastModified is not None
    assert emu.management.state.secrets[3001][added.Id].value == "x" * 4096
    with pytest.raises(ApiError) as info:
        c.compute.add_script_secret(3001, "API_TOKEN", "again")
    assert isinstance(info.value.details, FieldError) and info.value.details.Field == "Name"
    assert "s3cret" not in str(info.value) and "again" not in str(info.value)
    with pytest.raises(NotFoundError) as info:
        c.compute.update_script_secret(3001, 999_999, "v")
    assert info.value.details.ErrorKey == "secret.not_found"
    with pytest.raises(UnauthorizedError) as info:
        cdn(emu, None).compute.add_script_secret(3001, "X", "v")
    assert isinstance(info.value.details, FieldError)


def test_secret_length_limit_4096_vs_4097(emu):
    c = cdn(emu)
    sid = c.compute.add_script_secret(3002, "LIMIT", "a").Id
    assert c.compute.update_script_secret(3002, sid, "y" * 4096).Id == sid
    with pytest.raises(RequestValidationError) as info:
        c.compute.update_script_secret(3002, sid, "y" * 4097)
    assert info.value.field == "Secret" and "4097" in str(info.value)
    assert emu.management.state.secrets[3002][sid].value == "y" * 4096


# -- pull zone -------------------------------------------------------------------------
def test_add_hostname(emu):
    c = cdn(emu)
    assert c.pullzone.add_hostname(1234, "cdn.example.org") is None
    assert "cdn.example.org" in emu.management.state.hostnames[1234]
    with pytest.raises(RequestValidationError) as info:
        c.pullzone.add_hostname(1234, "")
    assert info.value.field == "Hostname"
    assert c.pullzone.add_hostname(1234, "x") is None  # one character is enough
    with pytest.raises(ApiError) as info:
        c.pullzone.add_hostname(1234, "cdn.example.org")
    assert info.value.status == 409 and info.value.code == "hostname.taken"
    with pytest.raises(NotFoundError):
        c.pullzone.add_hostname(999, "a.example")


# -- video -----------------------------------------------------------------------------
def test_videos_and_collections_page_up_to_the_totals(emu):
    c = cdn(emu)
    first = c.video.list_videos(7001, page=1, items_per_page=10)
    assert first.totalItems == 23 and first.currentPage == 1 and len(first.items) == 10
    every = list(c.video.iter_videos(7001, items_per_page=10))  # three pages
    assert len(every) == first.totalItems == len({v.guid for v in every})
    collections = list(c.video.iter_collections(7001, items_per_page=3))
    assert len(collections) == 7
    # Arrays the provider marks nullable come as null at times; no page is lost to it.
    for name in ("captions", "chapters", "moments", "metaTags", "transcodingMessages"):
        assert any(getattr(v, name) is None for v in every), name
        assert any(getattr(v, name) is not None for v in every), name
    assert any(col.previewImageUrls is None for col in collections)
    # A time without an offset is UTC.
    assert all(v.dateUploaded.tzinfo is UTC for v in every)
    assert c.video.list_videos(7001, page=99).items is None
    res = c.video.video_resolutions(7001, every[0].guid)
    assert (
        res.success
        and res.data.videoId == every[0].guid
        and "720p" in res.data.availableResolutions
    )
    with pytest.raises(NotFoundError) as info:
        c.video.video_resolutions(7001, "nope")
    assert isinstance(info.value.details, GenericRequestResponse)
    with pytest.raises(NotFoundError):
        c.video.list_videos(7002)
    with pytest.raises(RequestValidationError):
        c.video.list_videos(7001, page=0)


def test_oembed_needs_no_credentials(emu):
    result = cdn(emu, None).video.oembed("https://video.example/embed/1", max_width=320)
    assert result.type == "video" and result.width == 320 and "iframe" in result.html


# -- DNS -------------------------------------------------------------------------------
def test_dns_records_all_pages_and_types(emu):
    c = cdn(emu)
    records = list(c.dns.iter_records(9001, per_page=5))  # five pages
    assert len(records) == 23 == len({r.Id for r in records})
    # Type 16 (SOA) is newer than our enum: the integer is kept, the page is not lost.
    assert {r.Type for r in records} == set(DnsRecordType) | {16}
    assert {r.type_name for r in records if r.Type in (4, 16)} == {"MX", "16"}
    script = next(r for r in records if r.Type == DnsRecordType.Script)
    assert script.EnviromentalVariables[0].Name == "REGION"
    # The provider documents the array as nullable and the emulator sends null at times.
    assert any(r.EnviromentalVariables is None for r in records)
    only_mx = c.dns.list_records(9001, record_type=DnsRecordType.MX)
    assert only_mx.Items and all(r.Type == DnsRecordType.MX for r in only_mx.Items)
    assert not c.dns.list_records(9001, page=2_147_483_647, per_page=1000).Items  # [] or null
    with pytest.raises(NotFoundError) as info:
        c.dns.list_records(9002)
    assert isinstance(info.value.details, FieldError)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"per_page": 4}, "perPage"),
        ({"per_page": 1001}, "perPage"),
        ({"page": 0}, "page"),
        ({"page": 2_147_483_648}, "page"),
        ({"record_type": 16}, "type"),  # the seed's filter range is 0..15
        ({"record_type": -1}, "type"),
    ],
)
def test_dns_limits(emu, kwargs, field):
    with pytest.raises(RequestValidationError) as info:
        cdn(emu).dns.list_records(9001, **kwargs)
    assert info.value.field == field


def test_dns_limit_edges_accepted(emu):
    for per_page in (5, 1000):
        assert cdn(emu).dns.list_records(9001, per_page=per_page).TotalItems == 23
    for record_type in (0, 15):
        page = cdn(emu).dns.list_records(9001, record_type=record_type)
        assert page.Items and {r.Type for r in page.Items} == {record_type}


# -- containers ------------------------------------------------------------------------
@pytest.mark.parametrize("body", ["text", "json"])
def test_node_ips(emu, body):
    """Plain text per the provider's prose documentation, JSON per its OpenAPI page."""
    emu.management.fx = dataclasses.replace(emu.management.fx, node_ips_format=body)
    ips = cdn(emu).containers.list_node_ips()
    assert ips == list(emu.management.fx.node_ips)
    with pytest.raises(ForbiddenError) as info:
        cdn(emu, "wrong").containers.list_node_ips()
    assert isinstance(info.value.details, ContainerNodeError)
    assert info.value.details.title == "Forbidden"
    with pytest.raises(UnauthorizedError):
        cdn(emu, None).containers.list_node_ips()
