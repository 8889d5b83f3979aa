"""The package carries a licence people can adopt (issue #49)."""

from __future__ import annotations

import tomllib

from tests.conftest import REPO


def test_the_package_carries_its_licence_and_the_vendored_lists_own():
    """Apache-2.0, a LICENSE file, and each vendored list's own licence beside it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert "Apache License" in (REPO / "LICENSE").read_text()
    for name in project["license-files"]:
        assert (REPO / name).is_file(), name
    lists = REPO / "src" / "cdnlake" / "reports" / "lists"
    for data in lists.glob("*.json"):
        assert (lists / f"{data.stem}.LICENSE").is_file(), data
        assert str((lists / f"{data.stem}.LICENSE").relative_to(REPO)) in project["license-files"]
