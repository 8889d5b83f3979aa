"""migrate-lake on a lake written by the hour-file cdnlake (tests/fixtures/hourfile_lake.tar.gz:
two pull zones, v2 and v1, a shield zone, two rejected lines, made by that version's own
ingest, import-v1 and shield code)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import duckdb
import polars as pl
import pytest

from tests.conftest import FIXTURES_DIR, lake_frame, load_test_config, run_cli

CONFIG = """[storage]
root = "data"
[[zones]]
id = 1234
[[zones]]
id = 1235
source = "v1"
[[shield_zones]]
id = 5001
"""


@pytest.fixture
def old_lake(tmp_path) -> Path:
    with tarfile.open(FIXTURES_DIR / "hourfile_lake.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    return path


def old_rows(root: Path, table: str) -> pl.DataFrame:
    files = sorted((root / table).rglob("part-*.parquet"))
    return pl.concat([pl.read_parquet(f) for f in files])


def test_other_commands_refuse_an_unconverted_lake(old_lake):
    for args in (["status"], ["sql", "SELECT 1"], ["ingest"], ["maintain"]):
        result = run_cli("--config", str(old_lake), *args)
        assert result.returncode == 2, result.stderr
        assert "run `cdnlake migrate-lake`" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_migration_is_lossless_and_idempotent(old_lake):
    root = old_lake.parent / "data"
    requests, events = old_rows(root / "lake", "requests"), old_rows(root / "lake", "shield_events")
    con = duckdb.connect(str(root / "warehouse.duckdb"), read_only=True)
    runs = con.execute("SELECT count(*) FROM ingest_runs").fetchone()[0]
    rejects = con.execute("SELECT count(*) FROM rejected_lines").fetchone()[0]
    con.close()
    first = run_cli("--config", str(old_lake), "migrate-lake")
    assert first.returncode == 0, first.stderr
    assert f"requests: {requests.height} rows added" in first.stdout
    config = load_test_config(old_lake)
    migrated = lake_frame(config).sort("request_id")
    assert migrated["request_id"].to_list() == sorted(requests["request_id"].to_list())
    columns = [c for c in requests.columns if c != "ts"]
    assert migrated.select(columns).equals(requests.sort("request_id").select(columns))
    assert (migrated["ts"].dt.epoch("ms") == requests.sort("request_id")["ts"].dt.epoch("ms")).all()
    assert lake_frame(config, "shield_events").height == events.height
    assert lake_frame(config, "ingest_runs").height == runs
    assert lake_frame(config, "rejected_lines").height == rejects == 2
    # The earlier lake, state and warehouse are kept, not deleted.
    (aside,) = root.glob("migrated-*")
    assert (aside / "lake" / "requests").is_dir() and (aside / "warehouse.duckdb").exists()
    status = run_cli("--config", str(old_lake), "status", "--format", "json")
    assert '"watermark": "2026-11-20T11:55:00+00:00"' in status.stdout  # carried over
    snapshot = {t: lake_frame(config, t).height for t in ("requests", "ingest_runs")}
    second = run_cli("--config", str(old_lake), "migrate-lake")
    assert second.returncode == 0 and "nothing to migrate" in second.stdout
    assert {t: lake_frame(config, t).height for t in ("requests", "ingest_runs")} == snapshot


def test_an_interrupted_migration_is_finished_by_the_next(old_lake):
    from cdnlake.lake.upkeep.migrate import DONE_MARKER

    assert run_cli("--config", str(old_lake), "migrate-lake").returncode == 0
    root = old_lake.parent / "data"
    (aside,) = root.glob("migrated-*")
    (aside / DONE_MARKER).unlink()  # as if killed before the end
    again = run_cli("--config", str(old_lake), "migrate-lake")
    assert again.returncode == 0 and "0 rows added" in again.stdout
    ids = lake_frame(load_test_config(old_lake))["request_id"]
    assert ids.n_unique() == ids.len()


def test_rejected_lines_are_migrated_as_the_privacy_setting_stores_them(old_lake):
    """The earlier warehouse's rejected lines go through the table's one way in (held
    against erasures, scrubbed): under ``ip = "hash"`` no whole address is stored."""
    old_lake.write_text(CONFIG + '[privacy]\nip = "hash"\nhash_key_env = "MIGRATE_KEY"\n')
    env = {"MIGRATE_KEY": "k" * 32}
    first = run_cli("--config", str(old_lake), "migrate-lake", env=env)
    assert first.returncode == 0, first.stderr
    raw = lake_frame(load_test_config_env(old_lake, env), "rejected_lines")["raw_line"]
    assert raw.len() == 2 and any("HIT|200|notatime" in line for line in raw.to_list())
    assert not any("1.2.3.0" in line for line in raw.to_list()), raw.to_list()


def load_test_config_env(path: Path, env: dict[str, str]):
    from cdnlake.config import load_config
    from tests.conftest import KEY

    return load_config(path, env={"CDNLAKE_ACCESS_KEY": KEY, **env})


# migrate-lake, paused once it holds the writers' lock and has moved the earlier lake
# aside (argv[1] is touched), until argv[2] exists.
PAUSED = """
import pathlib, sys, time
from cdnlake.lake.upkeep import migrate
ready, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
original = migrate._import
def paused(*args, **kwargs):
    ready.touch()
    while not go.exists():
        time.sleep(0.05)
    return original(*args, **kwargs)
migrate._import = paused
from cdnlake.cli.main import main
raise SystemExit(main(sys.argv[3:]))
"""


def test_migrate_lake_and_vacuum_now_hold_each_other_off(old_lake, tmp_path):
    """migrate-lake commits to requests and the bookkeeping tables: a ``--vacuum-now``
    under way makes it wait or refuse naming the vacuum (nothing moved), and one that
    comes while it migrates refuses naming it (review finding 11)."""
    from cdnlake.coordination.sole import lock_path
    from cdnlake.lake.zone.lock import writers_held
    from cdnlake.scheduler import wait_for
    from tests.lake.test_vacuum_holds_writers import SHORT, cli, finished

    config = ("--config", str(old_lake))
    root = old_lake.parent / "data"
    work = load_test_config(old_lake).storage.work
    with writers_held(
        lock_path(work), work / "locks", [], who="edge-9:99 (maintain --vacuum-now)", wait=5
    ):
        code, out, err = finished(
            cli(
                SHORT,
                "cdnlake.cli.lake_cmd",
                "WRITING_WAIT_SECONDS",
                "0.3",
                *config,
                "migrate-lake",
            )
        )
    assert code == 1, (out, err)
    (line,) = err.strip().splitlines()
    assert "vacuumed" in line and "edge-9:99 (maintain --vacuum-now)" in line, line
    assert not list(root.glob("migrated-*")) and (root / "lake" / "requests").is_dir()

    ready, go = tmp_path / "ready", tmp_path / "go"
    migrating = cli(PAUSED, str(ready), str(go), *config, "migrate-lake")
    assert wait_for(ready.exists, 60), migrating.stderr.read() if migrating.poll() else ""
    code, out, err = finished(
        cli(
            SHORT,
            "cdnlake.cli.lake_cmd",
            "VACUUM_WAIT_SECONDS",
            "0.3",
            *config,
            "maintain",
            "--vacuum-now",
        )
    )
    assert code == 1, (out, err)
    assert "refused" in err and f":{migrating.pid} (migrate-lake)" in err, err
    go.touch()
    code, out, err = finished(migrating)
    assert code == 0, (out, err)
    ids = lake_frame(load_test_config(old_lake))["request_id"]
    assert ids.len() > 0 and ids.n_unique() == ids.len()
