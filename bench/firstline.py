"""bench/firstline.py CMD...: runs CMD with its stdout on a pipe and prints
"first SECONDS total SECONDS lines N": the time from the start to the first
line of a trace entry (the first line that starts with an entry index,
after the title and the column header), and to the end."""
import subprocess
import sys
import time

start = time.perf_counter()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
first = None
n = 0
for line in p.stdout:
    n += 1
    if first is None and line.lstrip()[:1].isdigit():
        first = time.perf_counter() - start
total = time.perf_counter() - start
if p.wait() != 0:
    sys.exit(f"firstline: {sys.argv[1:]} exited with {p.returncode}")
print(f"first {first if first is not None else float('nan'):.3f} total {total:.3f} lines {n}")
