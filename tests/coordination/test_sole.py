"""One daemon per storage root without PostgreSQL: the ``flock`` says who runs."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from cdnlake.coordination.sole import SoleDaemon, holder, lock_path
from cdnlake.errors import DaemonRunningError

# A daemon's hold on the root, in a process of its own, ready once it says so.
HOLD = """
import sys
from pathlib import Path
from cdnlake.coordination.sole import SoleDaemon
SoleDaemon(Path(sys.argv[1]), sys.argv[2]).start([], lambda key, at: None)
print("held", flush=True)
sys.stdin.read()
"""


def hold(work, ident: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(work), ident],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_killed_daemon_of_another_host_is_not_shown_as_running(tmp_path):
    """Its name stays in the lock file, but its lock died with it: a pid test could not
    tell (the pid is another host's, or reused), the lock can."""
    work = tmp_path / "work"
    assert holder(work) is None  # never started
    proc = hold(work, "other-host:1")
    try:
        assert holder(work) is not None and holder(work).startswith("other-host:1 since ")
        with pytest.raises(DaemonRunningError, match=r"other-host:1 since .* is running"):
            SoleDaemon(work, "here:2").start([], lambda key, at: None)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert lock_path(work).read_text().startswith("other-host:1 since ")  # left behind
    assert holder(work) is None
    second = SoleDaemon(work, "here:2")
    second.start([], lambda key, at: None)  # and the root can be taken over
    try:
        assert holder(work).startswith("here:2 since ")
    finally:
        second.stop()
    assert holder(work) is None
