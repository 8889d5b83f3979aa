"""The emulator's statistics count what its logging API serves, and the lose_hours switch
takes an hour out of the logging API only."""

from __future__ import annotations

import httpx

from tests.conftest import KEY, NOW, start_emulator

DAY = NOW.replace(hour=0).date()


def v2_count(url: str, zone: int, hour: int) -> int:
    body = httpx.get(
        f"{url}/v2/pullzones/{zone}/logs",
        params={
            "from": f"{DAY}T{hour:02d}:00:00Z",
            "to": f"{DAY}T{hour:02d}:59:59.999Z",
            "limit": 10000,
        },
        headers={"AccessKey": KEY},
    ).json()
    assert not body["pagination"]["hasMore"]
    return len(body["data"])


def v1_count(url: str, zone: int, hour: int) -> int:
    text = httpx.get(f"{url}/{DAY:%m-%d-%y}/{zone}.log", headers={"AccessKey": KEY}).text
    wanted = int(NOW.replace(hour=hour).timestamp()) // 3600
    return sum(1 for line in text.splitlines() if int(line.split("|")[2]) // 3_600_000 == wanted)


def statistics(url: str, zone: int) -> dict[str, float]:
    answer = httpx.get(
        f"{url}/statistics",
        params={
            "pullZone": zone,
            "dateFrom": f"{DAY}T00:00:00Z",
            "dateTo": f"{DAY}T12:00:00Z",
            "hourly": "true",
        },
        headers={"AccessKey": KEY},
    )
    assert answer.status_code == 200
    chart: dict[str, float] = answer.json()["RequestsServedChart"]
    return chart


def test_lose_hours_takes_an_hour_from_v1_and_v2_but_not_from_the_statistics() -> None:
    emu = start_emulator("1234,1235:v1", rpm=5)
    try:
        key = f"{DAY}T05:00:00Z"
        before = statistics(emu.url, 1234)
        assert v2_count(emu.url, 1234, 5) == before[key] > 0
        assert v1_count(emu.url, 1235, 5) == statistics(emu.url, 1235)[key] > 0
        control = httpx.post(
            f"{emu.url}/_emulator/faults", json={"lose_hours": f"1234@{DAY}T05,1235@{DAY}T05"}
        )
        assert control.status_code == 200
        assert v2_count(emu.url, 1234, 5) == 0 and v1_count(emu.url, 1235, 5) == 0
        assert v2_count(emu.url, 1234, 6) == before[f"{DAY}T06:00:00Z"] > 0
        assert statistics(emu.url, 1234) == before
        # Served again once the switch is off.
        httpx.post(f"{emu.url}/_emulator/faults", json={"lose_hours": ""})
        assert v2_count(emu.url, 1234, 5) == before[key]
        # A bad value is refused by the control endpoint, naming the switch.
        bad = httpx.post(f"{emu.url}/_emulator/faults", json={"lose_hours": "1234@noon"})
        assert bad.status_code == 400 and "lose_hours" in bad.text
        assert httpx.get(f"{emu.url}/_emulator/faults").json()["lose_hours"] == ""
        # Statistics take the access key, and know only the emulator's zones.
        assert httpx.get(f"{emu.url}/statistics", params={"pullZone": 1234}).status_code == 401
        unknown = httpx.get(
            f"{emu.url}/statistics", params={"pullZone": 99}, headers={"AccessKey": KEY}
        )
        assert unknown.status_code == 404
    finally:
        emu.stop()
