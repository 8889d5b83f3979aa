"""No data file outlives every log entry: a refused commit takes back the files it wrote,
and ``maintain`` removes those a killed process wrote but never committed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from cdnlake.errors import ZoneBusyError
from cdnlake.lake.log.progress import WATERMARK
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.log.store import Lake
from cdnlake.lake.upkeep.maintain import UNNAMED_FILE_HOURS, maintain
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.zone.writer import ZoneWriter
from tests.lake.test_commit import BASE, rows

ROOT = Path(__file__).resolve().parents[2]

# A process that writes its share's files, then is killed before its commit is sent.
KILLED_BEFORE_COMMIT = """
import os, signal, sys
sys.path.insert(0, {root!r})
from cdnlake.lake.log.schema import REQUESTS
from cdnlake.lake.zone.session import LakeSession
from cdnlake.lake.log.store import Lake
from cdnlake.lake.log.table import LogTable
from cdnlake.lake.zone.writer import ZoneWriter
from tests.lake.test_commit import BASE, rows

def killed(self, shares):
    print("WRITTEN", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

LogTable._commit = killed
session = LakeSession(Lake({uri!r}, {{}}))
ZoneWriter(session, REQUESTS, 1).commit(rows(5000, 40, BASE), {{}})
"""


def data_files(uri: str) -> set[str]:
    """The data files on disk, relative to the table."""
    table = Path(uri) / REQUESTS.name
    return {
        str(path.relative_to(table))
        for path in table.rglob("*.parquet")
        if "_delta_log" not in path.parts
    }


def logged_files(lake: Lake) -> set[str]:
    table = lake.open(REQUESTS)
    assert table is not None
    prefix = f"{lake.table_uri(REQUESTS).rstrip('/')}/"
    return {uri.removeprefix(f"file://{prefix}").removeprefix(prefix) for uri in table.file_uris()}


@pytest.mark.parametrize("writers", [2])
def test_files_on_disk_are_the_files_the_log_knows(tmp_path, writers):
    uri = str(tmp_path / "lake")
    first = LakeSession(Lake(uri, {}))
    ZoneWriter(first, REQUESTS, 1).commit(rows(0, 10, BASE), {WATERMARK: 1})
    # Processes racing on one zone: each one's commits are refused (prepared again)
    # whenever another commit of the zone came first.
    again: list[int] = []
    errors: list[BaseException] = []

    def process(n: int) -> None:
        try:
            session = LakeSession(Lake(uri, {}))
            writer = ZoneWriter(session, REQUESTS, 1)
            original = writer._again

            def counted(attempt: object) -> None:
                again.append(n)
                original(attempt)  # type: ignore[arg-type]

            writer._again = counted  # type: ignore[method-assign]
            for chunk in range(12):
                at = BASE + timedelta(minutes=chunk)
                frame = rows(100 * chunk + n, 30, at, tag=f"p{n}-")
                for _pass in range(20):  # outpaced five times in a row: the next pass's turn
                    try:
                        writer.commit(frame, {WATERMARK: chunk})
                        break
                    except ZoneBusyError:
                        continue
            session.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=process, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert again, "no commit was refused: the race did not happen"
    assert data_files(uri) == logged_files(Lake(uri, {}))  # refused commits took theirs back

    # A process killed between writing its files and its commit leaves them: no entry
    # names them, so only maintain can tell them apart.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([f"{ROOT}/src", str(ROOT)])}
    code = KILLED_BEFORE_COMMIT.format(root=str(ROOT), uri=uri)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL and "WRITTEN" in done.stdout, done.stderr
    unnamed = data_files(uri) - logged_files(Lake(uri, {}))
    assert len(unnamed) == 1, unnamed

    # Young, it may be a commit still on its way: kept, whatever the retention asked.
    report = maintain(LakeSession(Lake(uri, {})), retention_hours=0)
    (requests,) = [t for t in report.tables if t.table == REQUESTS.name]
    assert requests.unnamed == 0 and data_files(uri) - logged_files(Lake(uri, {})) == unnamed
    # A day old, it is no commit's any more: removed, and said so.
    (path,) = unnamed
    old = time.time() - (UNNAMED_FILE_HOURS + 1) * 3600
    os.utime(Path(uri) / REQUESTS.name / path, (old, old))
    report = maintain(LakeSession(Lake(uri, {})), retention_hours=0)
    (requests,) = [t for t in report.tables if t.table == REQUESTS.name]
    assert requests.unnamed == 1 and "1 never committed" in requests.line()
    assert data_files(uri) == logged_files(Lake(uri, {}))
