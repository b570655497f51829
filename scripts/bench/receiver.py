"""A callback receiver for the benchmark: HTTP/1.1 keep-alive on asyncio, fast enough that the
calls, not it, are measured. Answers 200 to each request (or, with --stall, reads requests and
never answers), and on SIGTERM writes {"<webhook-id>": [receive ms, ...]} as JSON to --out.

  python3 scripts/bench/receiver.py --port P --out FILE [--stall] [--status N]"""
import argparse
import asyncio
import json
import signal
import time

calls = {}


class Call(asyncio.Protocol):
    def __init__(self, stall, status):
        self.buf, self.stall = b"", stall
        self.answer = f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n".encode()

    def connection_made(self, transport):
        self.t = transport

    def data_received(self, data):
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
            if not self.stall:
                self.t.write(self.answer)


async def main(a):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, done.set_result, None)
    server = await loop.create_server(lambda: Call(a.stall, a.status), "127.0.0.1", a.port, backlog=1024)
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
    asyncio.run(main(ap.parse_args()))
