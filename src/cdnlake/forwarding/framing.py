"""RFC 6587 framing of syslog over a byte stream (TCP and TLS).

Each frame is either *octet counted* (``MSG-LEN SP SYSLOG-MSG``, MSG-LEN a decimal without
leading zero) or *newline terminated* (the message up to LF; a CR before it is dropped).
A sender may mix both on one connection: a frame starting with a digit is counted, any
other is newline terminated. A frame longer than the limit cannot be skipped safely (its
end is unknown, or the count may be a lie), so it ends the connection.
"""

from __future__ import annotations

MAX_FRAME_BYTES = 64 * 1024  # RFC 5425 asks for 8 KiB at least; v1 lines are far shorter
_COUNT_DIGITS = len(str(MAX_FRAME_BYTES)) + 1  # more digits than this: oversized anyway


class FrameError(Exception):
    """The stream cannot be framed any further (an oversized frame): drop the connection."""


class Deframer:
    """Feed it a stream's bytes as they come; it hands back the whole frames so far."""

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self.max_frame = max_frame
        self.error: FrameError | None = None  # set once the stream cannot be framed further
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        """Bytes of a frame begun but not finished."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """The frames completed by ``data``; those before an oversized frame too, with
        ``error`` then set (nothing after it is framed: drop the connection)."""
        if self.error is not None:
            return []
        self._buffer += data
        frames: list[bytes] = []
        while self._buffer:
            try:
                frame = self._next()
            except FrameError as exc:
                self.error = exc
                self._buffer.clear()
                break
            if frame is None:
                break
            if frame:  # an empty line between frames is no message
                frames.append(frame)
        return frames

    def _next(self) -> bytes | None:
        buf = self._buffer
        if buf[:1].isdigit() and buf[:1] != b"0":
            space = buf.find(b" ", 0, _COUNT_DIGITS + 1)
            digits = buf[:space] if space > 0 else buf[:_COUNT_DIGITS]
            if digits.isdigit():  # all digits so far: octet counting
                if space < 0:
                    if len(buf) > _COUNT_DIGITS:
                        raise FrameError(f"frame length has more than {_COUNT_DIGITS} digits")
                    return None  # the count goes on in the next read
                length = int(digits)
                if length > self.max_frame:
                    raise FrameError(f"frame of {length} bytes (at most {self.max_frame})")
                end = space + 1 + length
                if len(buf) < end:
                    return None
                frame = bytes(buf[space + 1 : end])
                del buf[:end]
                return frame
        # Newline terminated (a frame starting with a digit but no count falls here too).
        newline = buf.find(b"\n", 0, self.max_frame + 2)
        if newline < 0:
            if len(buf) > self.max_frame + 1:
                raise FrameError(f"no line end within {self.max_frame} bytes")
            return None
        frame = bytes(buf[:newline])
        del buf[: newline + 1]
        return frame[:-1] if frame.endswith(b"\r") else frame
