"""The result channel between the parent and an evaluation child (both sides; trust model in
``workflow_scripts.evaluation``).

The parent passes a pipe fd on the child's stdin. Every frame is ``MAGIC``, the header's length and the JSON header
(at most ``MAX_HEADER`` bytes). Frames carry no payload: tensors travel through memory areas (``transport``).

Nothing authenticates a frame, and nothing could: once the answer is imported, its process holds the descriptor and
can read its own memory, so any key it held would be the answer's too (an answer once read one from /proc/self/mem
and forged its verdict and its times). So no secret is ever sent to the child, and every message is the answer's
word: the trusted side validates each (``evidence``), bounds what it claims by what it observes itself, and takes a
message out of the protocol's order for the answer's failure. A frame with bad framing, an oversized or unparsable
header (a deeply nested one included) is a ``ProtocolError``: the parent treats it as the answer's failure
(``result_channel_forged``), never as its own.
"""

from __future__ import annotations

import json
import os
import select
import time
from dataclasses import dataclass
from typing import Any

HARNESS_VERSION = "1"  # the evaluation harness (channel, child, checks) recorded in every result's protocol
MAGIC = b"KBH1"
MAX_HEADER = 1 << 20


class ProtocolError(Exception):
    """A message that breaks the framing or the protocol: treated as forged."""


class ChildDied(Exception):
    pass


class ChildTimeout(Exception):
    pass


@dataclass
class Message:
    header: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.header.get("type"))


class ChannelReader:
    """Parent end of the result pipe: reads frames with a deadline."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.bytes_read = 0
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def ready(self, timeout_s: float) -> bool:
        """Whether a frame (or the channel's end) is waiting to be read, within ``timeout_s``; reads nothing."""
        return bool(self._poll.poll(int(timeout_s * 1000)))

    def _read_exact(self, n: int, deadline: float, into: memoryview | None = None) -> bytes | None:
        buf = into if into is not None else memoryview(bytearray(n))
        got = 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildTimeout()
            if not self._poll.poll(int(min(left, 1.0) * 1000) + 1):
                continue
            k = os.readv(self.fd, [buf[got:n]])
            if k == 0:
                raise ChildDied("result channel closed")
            got += k
        self.bytes_read += n
        return None if into is not None else bytes(buf)

    def recv(self, deadline: float) -> Message:
        pre = self._read_exact(8, deadline)
        assert pre is not None
        if pre[:4] != MAGIC:
            raise ProtocolError("bad frame magic")
        hlen = int.from_bytes(pre[4:8], "big")
        if hlen > MAX_HEADER:
            raise ProtocolError("oversized header")
        hb = self._read_exact(hlen, deadline)
        assert hb is not None
        try:
            header = json.loads(hb)
        except (ValueError, RecursionError) as e:
            raise ProtocolError(f"bad header: {type(e).__name__}") from None
        if not isinstance(header, dict):
            raise ProtocolError("header is not an object")
        return Message(header)


def read_command(stdin: Any) -> dict[str, Any]:
    """Child side: the trusted side's next command (one JSON line on stdin); the process ends when the parent is
    gone."""
    line = stdin.readline()
    if not line:
        os._exit(3)
    return json.loads(line)


def exception_text(limit: int = 4000) -> str:
    """Child side: the exception being handled, as a traceback of at most about ``limit`` characters (its start and
    its end) for the error message sent to the trusted side."""
    import traceback

    text = traceback.format_exc()
    return text if len(text) <= limit else text[: limit // 4] + "\n...\n" + text[-3 * limit // 4:]


class Sender:
    """Child end of the result pipe. Built before any answer code runs; keeps its own references."""

    def __init__(self, fd: int) -> None:
        import threading

        self._fd = fd
        self._write = os.write
        self._dumps = json.dumps
        self._lock = threading.Lock()
        # Bound into the instance: replacing Sender.send on the class (no instance needed) must not filter what the
        # harness sends (flags, monitor events).
        self.send = self.send  # type: ignore[method-assign]
        self._write_all = self._write_all  # type: ignore[method-assign]

    def send(self, header: dict[str, Any]) -> None:
        hb = self._dumps(header, separators=(",", ":"), default=str).encode()
        with self._lock:
            self._write_all(memoryview(MAGIC + len(hb).to_bytes(4, "big") + hb))

    def _write_all(self, mv: memoryview) -> None:
        off = 0
        n = mv.nbytes
        while off < n:
            off += self._write(self._fd, mv[off: off + (1 << 22)])
