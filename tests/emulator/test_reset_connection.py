"""A client resetting its connection is one line in the emulator's log, not a traceback
(issue #49)."""

from __future__ import annotations

import logging
import socket
import struct

from cdnlake.scheduler import wait_for
from tests.conftest import start_emulator


def test_a_reset_connection_is_one_line(capfd, caplog):
    emu = start_emulator("1234")
    try:
        host, port = emu.url.split("//")[1].split(":")
        with caplog.at_level(logging.INFO, logger="cdnlake.emulator"):
            sock = socket.create_connection((host, int(port)))
            sock.sendall(b"GET /pullzone HTTP/1.1\r\nHost: x\r\n")  # no end of headers
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # linger 0: an RST, not a FIN
            assert wait_for(lambda: "closed its connection" in caplog.text, 10), caplog.text
    finally:
        emu.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err
    lines = [r for r in caplog.records if "closed its connection" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0].getMessage()
