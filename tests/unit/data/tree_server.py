"""A small real HTTP server with a spawned process tree, for lifecycle tests of specwatch.server.process.

Usage: tree_server.py PORT [--crash-during-boot] [--ignore-sigterm] [--boot-delay S] [--helpers-quit-on FILE]
It spawns two multiprocessing children (like an engine's workers) and answers /health_generate.
--helpers-quit-on FILE: each worker starts a helper process of its own before the server answers; the helpers
quit once FILE exists, as a pool of compile workers under an engine's scheduler quits when idle.
"""

import http.server
import multiprocessing as mp
import signal
import sys
import time

HELPER = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.05)\n"


def worker(quit_on: str, started=None) -> None:
    if quit_on:
        import subprocess

        subprocess.Popen([sys.executable, "-c", HELPER, quit_on])
    if started is not None:
        started.set()  # the server answers only once every helper is there
    while True:
        time.sleep(0.2)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health_generate" else 404)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    port = int(sys.argv[1])
    if "--ignore-sigterm" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    delay = float(sys.argv[sys.argv.index("--boot-delay") + 1]) if "--boot-delay" in sys.argv else 0.0
    ctx = mp.get_context("spawn")
    quit_on = sys.argv[sys.argv.index("--helpers-quit-on") + 1] if "--helpers-quit-on" in sys.argv else ""
    events = [ctx.Event() for _ in range(2)]
    procs = [ctx.Process(target=worker, args=(quit_on, e), daemon=True) for e in events]
    for p in procs:
        p.start()
    for e in events if quit_on else ():
        e.wait(120)
    print(f"started workers {[p.pid for p in procs]}", flush=True)
    time.sleep(delay)
    if "--crash-during-boot" in sys.argv:
        print("RuntimeError: CUDA out of memory while capturing graphs (simulated boot failure)", flush=True)
        sys.exit(3)
    print("server ready", flush=True)
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
