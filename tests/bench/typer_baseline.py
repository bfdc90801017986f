"""The start-up yardstick: a one-command Typer app that appends one framed record (header +
CRC-32) to a log file under ``flock``. ``mqctl send t hello`` should start no slower.

    python tests/bench/typer_baseline.py TOPIC BODY --dir DIR
"""
import fcntl
import os
import struct
import time
import zlib

import typer

app = typer.Typer()
HEADER = struct.Struct("<IIIQ")   # size, magic, crc32, store timestamp


@app.command()
def send(topic: str, body: str, dir: str = typer.Option("/tmp/typer-baseline", help="Log directory.")) -> None:
    """Append BODY to DIR/log under DIR/lock."""
    os.makedirs(dir, exist_ok=True)
    payload = topic.encode() + b"\0" + os.fsencode(body)
    record = HEADER.pack(HEADER.size + len(payload), 0xDAA320A7, zlib.crc32(payload), time.time_ns() // 1_000_000) + payload
    lock = os.open(os.path.join(dir, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        fd = os.open(os.path.join(dir, "log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, record)
        os.close(fd)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
    print("sent 1 message")


if __name__ == "__main__":
    app()
