"""The fair share every daemon computes alike."""

from __future__ import annotations

from collections import Counter

from cdnlake.coordination.assign import share

ZONES = {f"requests/{i}" for i in range(1, 13)}


def test_twelve_zones_three_daemons_four_each():
    owners = share({"a:1": ZONES, "b:2": ZONES, "c:3": ZONES})
    assert set(owners) == ZONES
    assert sorted(Counter(owners.values()).values()) == [4, 4, 4]


def test_same_answer_whatever_the_order_it_is_given_in():
    one = share({"a:1": ZONES, "b:2": ZONES, "c:3": ZONES})
    other = share(dict(reversed(list({"c:3": ZONES, "b:2": ZONES, "a:1": ZONES}.items()))))
    assert one == other


def test_a_daemon_leaving_moves_only_its_own_zones_and_a_few_more():
    before = share({"a:1": ZONES, "b:2": ZONES, "c:3": ZONES, "d:4": ZONES})
    after = share({"a:1": ZONES, "b:2": ZONES, "c:3": ZONES})
    moved = {z for z in ZONES if before[z] != after[z]}
    orphaned = {z for z in ZONES if before[z] == "d:4"}
    assert orphaned <= moved
    assert len(moved) <= len(orphaned) + 4  # quota changes shift a few, not all
    assert sorted(Counter(after.values()).values()) == [4, 4, 4]


def test_a_zone_goes_only_to_a_daemon_configured_for_it():
    only_b = {"requests/99"}
    owners = share({"a:1": ZONES, "b:2": ZONES | only_b})
    assert owners["requests/99"] == "b:2"
    counts = Counter(owners.values())
    assert abs(counts["a:1"] - counts["b:2"]) <= 1


def test_no_daemons_no_owners():
    assert share({}) == {}
