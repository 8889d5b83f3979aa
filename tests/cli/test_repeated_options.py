"""An option that takes one value, given twice, is refused in one line (exit 2) instead of
keeping the last in silence; options that take many keep them all."""

from __future__ import annotations

import pytest

from cdnlake.cli.main import build_parser, main


@pytest.mark.parametrize(
    "argv",
    [
        ["import-v1", "--zone", "1234", "--zone", "1235", "f.log"],
        ["report", "--date", "2026-11-20", "--date", "2026-11-21"],
        ["report", "--zone", "1", "--zone", "2"],
        ["audit", "--from", "2026-11-20", "--from", "2026-11-21", "--to", "2026-11-22"],
        ["ingest", "--zone", "1", "--from", "2026-11-20T00:00", "--from", "2026-11-20T01:00"],
    ],
)
def test_a_single_valued_option_given_twice_is_refused(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "given twice" in err[0] and "give it once" in err[0], err


def test_repeatable_options_keep_every_value():
    args = build_parser().parse_args(["ingest", "--zone", "1234", "--zone", "1235"])
    assert args.zone == [1234, 1235]
    args = build_parser().parse_args(["import-v1", "--zone", "1234", "f.log"])
    assert args.zone == 1234
