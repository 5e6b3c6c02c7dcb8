"""data-parallel.test's helper: gpipe-run OUT (a --data-parallel program) mid-run,
SIGKILL to the process of stage S of replica R (found by its status file,
stageS.rR.status), then print gpipe-run's exit code and error lines."""
import os
import signal
import subprocess
import sys
import time

gpipe_run, out, data, stage, replica = sys.argv[1:6]
p = subprocess.Popen([gpipe_run, out, "--data", data, "--steps", "100000000", "-q"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
marker = "stage%s.r%s.status" % (stage, replica)
victim, deadline = None, time.time() + 30
while victim is None and time.time() < deadline:
    time.sleep(0.2)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if (argv and argv[0].decode(errors="replace").endswith("/stage" + stage)
                and any(a.decode(errors="replace").endswith(marker) for a in argv)):
            victim = int(pid)
if victim is None:
    p.kill()
    sys.exit("no process of stage %s of replica %s within 30 s" % (stage, replica))
time.sleep(1.0)  # well into the steps
os.kill(victim, signal.SIGKILL)
try:
    _, err = p.communicate(timeout=30)
except subprocess.TimeoutExpired:
    p.kill()
    sys.exit("gpipe-run did not end within 30 s of the kill")
print("exit", p.returncode)
for line in err.splitlines():
    if line.startswith("gpipe-run: error:"):
        print(line.replace("pid %d" % victim, "pid VICTIM"))
