"""Boot one server of a profile, load it a little, then ``specwatch capture`` and ``specwatch inspect`` it.

    python docs/validation/sglang_capture.py PROFILE SERVER OUT_DIR [--requests 6]

What a user does on their own host with a server that is already up: capture it while it serves, then judge the
capture offline. Here the server is booted through specwatch's pool (so nothing is left running, even on an
error), given ``--requests`` greedy requests of 64 tokens at once, captured by URL, and inspected against its
profile. Both commands' output and exit codes are printed; the capture is left in OUT_DIR.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

from specwatch.load.client import Client
from specwatch.profiles.loading import load_profiles
from specwatch.server.gpu import visible_gpus
from specwatch.server.pool import ServerPool


async def _load(url: str, n: int) -> list[object]:
    async with Client(url) as client:
        return await asyncio.gather(*[client.generate(f"capture request {i}: the accept length", max_new_tokens=64)
                                      for i in range(n)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sglang_capture.py", description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("server")
    ap.add_argument("out_dir")
    ap.add_argument("--requests", type=int, default=6)
    a = ap.parse_args(argv)
    profiles = load_profiles(a.profile)
    out = Path(a.out_dir)
    pool = ServerPool(profiles.servers.values(), out / "servers", gpus=tuple(visible_gpus()),
                      progress=lambda msg: print(f"[capture] {msg}", flush=True))
    rc = 0
    try:
        server = pool.get(profiles.servers[a.server])
        replies = asyncio.run(_load(server.url, a.requests))
        print(f"[capture] {len(replies)} requests answered")
        cap = subprocess.run([sys.executable, "-m", "specwatch.cli", "capture", str(out / "capture"), "--url",
                              server.url, "--log", str(server.log_path)], check=False)
        rc |= cap.returncode
        ins = subprocess.run([sys.executable, "-m", "specwatch.cli", "inspect", str(out / "capture"), "--profile",
                              a.profile, "--server", a.server, "-v"], check=False)
        print(f"[capture] capture exit {cap.returncode}, inspect exit {ins.returncode}")
    finally:
        pool.stop_all()
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
