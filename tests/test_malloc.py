"""The allocator tuning every cdnlake command applies takes effect on glibc."""

from __future__ import annotations

import platform

import pytest

import cdnlake.cli.main as cli_main
from cdnlake.malloc import keep_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_takes_the_settings():
    assert keep_freed_memory() is True


def test_every_command_applies_it(monkeypatch, capsys):
    calls: list[int] = []
    monkeypatch.setattr(cli_main, "keep_freed_memory", lambda: calls.append(1))
    with pytest.raises(SystemExit):
        cli_main.main(["--help"])
    assert calls == [1] and "usage" in capsys.readouterr().out
