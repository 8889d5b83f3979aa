"""Names from config or data never steer a write outside storage.root."""

from __future__ import annotations

from tests.conftest import (
    ingest_all,
    lake_text_contains,
    load_test_config,
    run_cli,
    start_emulator,
    write_config,
)


def test_hostile_zone_name_and_payloads_stay_inside_root(tmp_path):
    emu = start_emulator("1234")
    try:
        path = write_config(tmp_path, emu, zones=[(1234, "v2")])
        path.write_text(
            path.read_text().replace('name = "z1234"', 'name = "../../../escape/\\u0000x"')
        )
        config = load_test_config(path)
        before = {p for p in tmp_path.parent.rglob("*") if "escape" in p.name}
        assert all(r.ok for r in ingest_all(config, emu))
        day = emu.clock.now().date().isoformat()
        assert run_cli("--config", str(path), "report", "--date", day).returncode == 0
        after = {p for p in tmp_path.parent.rglob("*") if "escape" in p.name}
        assert after == before
        root = config.storage.root
        written = [p for p in tmp_path.rglob("*") if p.is_file() and p != path]
        assert written and all(root in p.parents for p in written)
        # Payloads are stored unchanged, as data.
        assert lake_text_contains(root, "<script>alert('ua')</script>")
    finally:
        emu.stop()
