"""The daemon's syslog receiver for the provider's log forwarding.

The provider pushes each request of a pull zone as an RFC 5424 syslog message whose text is
one v1 log line. :mod:`.framing` cuts a TCP/TLS byte stream into messages (RFC 6587),
:mod:`.syslog` takes the text out of a message, :mod:`.batch` parses the lines by the v1
parser's rules and commits them through the lake's exactly-once commit, and
:mod:`.receiver` listens (TCP, TLS, UDP) and feeds the batch.
"""
