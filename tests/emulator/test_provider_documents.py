"""Where the provider's own documents speak, the emulator and the client follow them."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from cdnlake.client import ApiClient, LoggingClient
from cdnlake.client.dns import PAGE_PARAM, PAGE_SIZE_PARAM
from cdnlake.config import ApiConfig, Secret
from cdnlake.emulator.shield import parse_openapi_operations
from tests.conftest import FAST_RETRY, KEY, NOW, start_emulator

PROVIDER = Path(__file__).resolve().parents[3] / "shared" / "provider"
DAY = (NOW - timedelta(days=1)).date()


@pytest.fixture(scope="module")
def emu():
    e = start_emulator("1234,1235:v1")
    yield e
    e.stop()


def get(emu, path: str, **params: str) -> httpx.Response:
    return httpx.get(f"{emu.url}{path}", params=params, headers={"AccessKey": KEY})


@pytest.mark.skipif(not PROVIDER.is_dir(), reason="the provider's documents are not beside")
def test_dns_paging_names_are_the_providers():
    """The seed names no DNS paging parameters; the provider's GET /dnszone does."""
    core = json.loads((PROVIDER / "core.json").read_text())
    documented = {p["name"] for p in core["paths"]["/dnszone"]["get"]["parameters"]}
    assert {PAGE_PARAM, PAGE_SIZE_PARAM} <= documented


def test_dns_records_refuse_parameter_names_nobody_documented(emu):
    wrong = get(emu, "/dnszone/9001/records", pageSize="5")
    assert wrong.status_code == 400 and wrong.json()["Field"] == "pageSize"
    right = get(emu, "/dnszone/9001/records", page="2", perPage="5", type="4")
    assert right.status_code == 200 and right.json()["CurrentPage"] == 2


def day_lines(response: httpx.Response) -> list[str]:
    return response.text.splitlines()


def test_v1_order_is_sort_in_the_openapi_and_order_in_the_prose(emu):
    path = f"/{DAY:%m-%d-%y}/1235.log"
    default = day_lines(get(emu, path))  # desc by default
    by_sort = day_lines(get(emu, path, sort="asc"))
    by_order = day_lines(get(emu, path, order="asc"))
    assert by_sort == by_order == default[::-1] and len(by_sort) > 100
    clash = get(emu, path, sort="asc", order="desc")
    assert clash.status_code == 400


def test_the_client_asks_for_ascending_files_under_both_names(emu, tmp_path):
    api = ApiConfig(logging_url=emu.url, access_key=Secret(KEY))
    client = LoggingClient(ApiClient(api, retry=FAST_RETRY))
    dest = tmp_path / "day.log"
    client.download_v1(1235, DAY, dest)
    raw = dest.read_bytes()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    stamps = [int(line.split("|")[2]) for line in text.decode().splitlines()]
    ascending = day_lines(get(emu, f"/{DAY:%m-%d-%y}/1235.log", order="asc"))
    assert stamps == [int(line.split("|")[2]) for line in ascending]


def test_openapi_yaml_is_read_by_a_yaml_parser():
    """Flow style, anchors and quoted keys: YAML a line-by-line reader gets wrong."""
    document = """
openapi: "3.0.0"
x-common: &read {get: {summary: read}}
paths: {"/a": *read, '/b': {post: {}, parameters: []}}
"""
    assert sorted(parse_openapi_operations(document)) == [("get", "/a"), ("post", "/b")]
    assert parse_openapi_operations("paths: {/a: {get: {}}}") is None  # not OpenAPI
    assert parse_openapi_operations("openapi: [unclosed") is None
