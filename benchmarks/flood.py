"""The pool's endpoint under a flood: N students check at once, first alone, then while a flood of
idle connections (no TLS, no token) is held open from another loopback address, each closed one opened again.

    python3 benchmarks/flood.py [--students 30] [--idle 300] [--cpu-workers 2] [--out FILE]

Loopback only (the pool on 127.0.0.1, the flood from 127.0.0.2), bounded: the flood stops when the class has its
grades, or after --limit seconds. Reports, side by side: how many students were graded, the batch's wall time,
and the ratio of the two batches.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pool import grade, solved, start_pool


class Flood:
    """`count` idle connections to `port` from 127.0.0.2, kept open: each one the endpoint closes is opened again."""

    def __init__(self, port: int, count: int, limit: float):
        self.port, self.count, self.end, self.opened = port, count, time.monotonic() + limit, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _open(self) -> socket.socket | None:
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        try:
            s.connect(("127.0.0.1", self.port))
            self.opened += 1
            return s
        except OSError:
            s.close()
            return None

    def _hold(self) -> None:
        held = [self._open() for _ in range(self.count)]
        while not self.stop.is_set() and time.monotonic() < self.end:
            for i, s in enumerate(held):
                try:
                    closed = s is None or s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if closed:
                    if s:
                        s.close()
                    held[i] = self._open()
            time.sleep(0.05)
        for s in held:
            if s:
                s.close()


def batch(students: list, workers: int) -> tuple[int, float]:
    start = time.perf_counter()
    with ThreadPoolExecutor(len(students)) as pool:
        done = list(pool.map(lambda st: grade(st[0], st[1], False)[0], students))
    return sum(1 for rec in done if rec.get("checked")), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--idle", type=int, default=300)
    parser.add_argument("--cpu-workers", type=int, default=2)
    parser.add_argument("--limit", type=float, default=900)
    parser.add_argument("--out", default=None)
    a = parser.parse_args()
    from playground.pool import cluster as pool

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "pool"
        proc = start_pool(folder, a.cpu_workers)
        try:
            p = pool.Pool(folder)
            students = []
            for k in range(a.students):
                name = f"s{k:02d}"
                solved("sum", "cpp", Path(tmp) / name, name)
                students.append((Path(tmp) / name, pool.add_student(p, name, Path(tmp))))
            graded_alone, alone = batch(students, a.cpu_workers)
            flood = Flood(p.config["endpoint_port"], a.idle, a.limit)
            flood.thread.start()
            time.sleep(2)  # the flood in place before the class checks
            graded, flooded = batch(students, a.cpu_workers)
            flood.stop.set()
            flood.thread.join()
        finally:
            proc.terminate()
            proc.wait(30)
    commit = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"# {a.students} students checking at once, alone and under a flood of {a.idle} idle connections",
             "", f"`python3 benchmarks/flood.py --students {a.students} --idle {a.idle} --cpu-workers {a.cpu_workers}` "
             f"at {commit}: sum/cpp on {a.cpu_workers} CPU workers, `kplay check --pool --no-sanitize` per student; the "
             "flood from 127.0.0.2 (no TLS, no token), each closed connection opened again.", "",
             "| batch | graded | wall (s) |", "|---|---:|---:|",
             f"| alone | {graded_alone} / {a.students} | {alone:.1f} |",
             f"| under the flood | {graded} / {a.students} | {flooded:.1f} |", "",
             f"Flooded / alone: {flooded / alone:.2f}. Connections the flood opened: {flood.opened} "
             f"({flood.opened - a.idle} of them again, after the endpoint closed one for a student or at its handshake limit)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    sys.exit(0 if graded == a.students else 1)


if __name__ == "__main__":
    main()
