"""A callback receiver for the benchmark: HTTP/1.1 keep-alive on asyncio, fast enough that the
calls, not it, are measured. Answers 200 to each request (or, with --stall, reads requests and
never answers), and on SIGTERM writes {"<webhook-id>": [receive ms, ...]} as JSON to --out.
--answer-ms delays each answer; --drop-after-ms makes it, that long after its first request,
reset every connection it has or is offered (an endpoint that dies under load).

  python3 scripts/bench/receiver.py --port P --out FILE [--stall] [--status N]
                                    [--answer-ms MS] [--drop-after-ms MS]"""
import argparse
import asyncio
import json
import signal
import socket
import struct
import time

calls = {}
first = []   # the first request's time


def reset(transport):
    """Closes with a TCP reset, as a crashed or overloaded peer does."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class Call(asyncio.Protocol):
    def __init__(self, a):
        self.buf, self.a = b"", a
        self.answer = f"HTTP/1.1 {a.status} X\r\nContent-Length: 0\r\n\r\n".encode()

    def dropping(self):
        return self.a.drop_after_ms is not None and first and \
            time.time() * 1000 >= first[0] + self.a.drop_after_ms

    def connection_made(self, transport):
        self.t = transport
        if self.dropping():
            reset(transport)

    def data_received(self, data):
        if self.dropping():
            reset(self.t)
            return
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").lower()
            length, wid = 0, ""
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k == "content-length":
                    length = int(v)
                elif k == "webhook-id":
                    wid = v.strip()
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            calls.setdefault(wid, []).append(time.time() * 1000)
            if not first:
                first.append(time.time() * 1000)
            if self.a.stall:
                continue
            if self.a.answer_ms:
                asyncio.get_running_loop().call_later(self.a.answer_ms / 1000, self.late_answer)
            else:
                self.t.write(self.answer)

    def late_answer(self):
        if not self.t.is_closing():
            self.t.write(self.answer)


async def main(a):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, done.set_result, None)
    server = await loop.create_server(lambda: Call(a), "127.0.0.1", a.port, backlog=1024)
    await done
    server.close()
    with open(a.out, "w") as f:
        json.dump(calls, f)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stall", action="store_true")
    ap.add_argument("--status", type=int, default=200)
    ap.add_argument("--answer-ms", type=int, default=0)
    ap.add_argument("--drop-after-ms", type=int)
    asyncio.run(main(ap.parse_args()))
