"""The local engine's link to its dashboard: one end of a socketpair the dashboard made
before spawning the engine process, carrying the ingest protocol's messages (announce,
frames, stats, commands, replies) one per line. Holding the socket is the credential: no
port, no secret on a command line. Our JSON (`protocol.envelope.encode`) never holds a
raw newline, so a line is exactly one message.
"""

from __future__ import annotations

import asyncio
import socket

LINE_LIMIT = 256 << 20
"""A line can be a large reply or a burst of frames; bounded so a runaway end fails."""


WRITE_HIGH_WATER = 256 << 10


class LinkClosed(ConnectionError):
    """The other end is gone (its process exited or closed the socket)."""


class Link:
    """Newline-framed text messages over a connected stream socket (either end)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, sock: socket.socket) -> Link:
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=LINE_LIMIT)
        return cls(reader, writer)

    async def send_text(self, text: str) -> None:
        """Send one message (`text` must not contain a raw newline)."""
        await self.send_lines([text])

    async def send_lines(self, lines: list[str]) -> None:
        """Send several messages in one write (frames of a batch)."""
        if self.writer.is_closing():
            raise LinkClosed("the link is closed")
        data = ("\n".join(lines) + "\n").encode()
        async with self._lock:
            try:
                self.writer.write(data)
                await self.writer.drain()
            except (ConnectionError, OSError) as exc:
                raise LinkClosed(str(exc)) from None

    async def recv(self) -> str:
        """The next message; raises LinkClosed at the end of the stream."""
        try:
            line = await self.reader.readline()
        except (ConnectionError, OSError, asyncio.LimitOverrunError, ValueError) as exc:
            raise LinkClosed(str(exc)) from None
        if not line:
            raise LinkClosed("the other end closed the link")
        return line.decode().rstrip("\n")

    def busy(self) -> bool:
        """Written data the other end has not taken yet is past the transport's limit."""
        transport = self.writer.transport
        return transport.get_write_buffer_size() > WRITE_HIGH_WATER

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()
