"""GPU smoke of the reference server: boot, generate, read metrics; dump worker stacks if it hangs.

Usage: python docs/validation/smoke.py OUTDIR -- [refserver flags]   (harness scenario `smoke`)
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import psutil

out_dir, args = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
port = 31000 + os.getpid() % 1000
name = "-".join(a.strip("-") for a in args if not a.startswith("-"))[:60]
log = open(os.path.join(out_dir, f"smoke-{name}.log"), "w")  # noqa: SIM115 - the server's stdout
t0 = time.time()
proc = subprocess.Popen([sys.executable, "-m", "specwatch.refserver", "--port", str(port), "--enable-metrics", *args],
                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
url = f"http://127.0.0.1:{port}"
ready = False
while time.time() - t0 < 150 and proc.poll() is None:
    try:
        ready = urllib.request.urlopen(url + "/health_generate", timeout=5).status == 200
    except OSError:
        pass
    if ready:
        break
    time.sleep(1)
print(f"args={args} ready={ready} boot_s={time.time() - t0:.1f} rc={proc.poll()}", flush=True)
if ready:
    body = json.dumps({"text": "hello world " * 8, "sampling_params": {"max_new_tokens": 128, "ignore_eos": True}})
    for i in range(3):
        t = time.time()
        r = json.load(urllib.request.urlopen(urllib.request.Request(url + "/generate", body.encode(),
                                                                    {"Content-Type": "application/json"})))
        dt = time.time() - t
        meta = r["meta_info"]
        print(f"  gen {i}: {meta['completion_tokens'] / dt:.1f} tok/s accept={meta.get('spec_accept_length')}")
    m = urllib.request.urlopen(url + "/metrics").read().decode()
    print("  " + "\n  ".join(line for line in m.splitlines() if "cuda_graph_passes_total{" in line))
else:
    for p in psutil.Process(proc.pid).children(recursive=True):
        os.kill(p.pid, signal.SIGUSR1)
    time.sleep(3)
os.killpg(proc.pid, signal.SIGTERM)
try:
    proc.wait(20)
except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
log.close()
