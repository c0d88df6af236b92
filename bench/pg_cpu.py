#!/usr/bin/env python3
"""PostgreSQL CPU seconds so far: the postmaster, its live children and the children it reaped.

    bench/pg_cpu.py DATA_DIRECTORY     (prints seconds; read before and after a run, the difference is its cost)

Shared by bench/context/run.sh and bench/least/run.sh (the Swift bench reads the same /proc fields itself).
"""
import os
import sys

hz = os.sysconf("SC_CLK_TCK")
pm = int(open(os.path.join(sys.argv[1], "postmaster.pid")).readline())


def stat(pid):
    s = open(f"/proc/{pid}/stat").read()
    f = s[s.rindex(")") + 2:].split()
    return int(f[1]), int(f[11]) + int(f[12]), int(f[13]) + int(f[14])


total = sum(stat(pm)[1:])
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        ppid, own, _ = stat(int(pid))
    except (OSError, ValueError):
        continue
    if ppid == pm:
        total += own
print(total / hz)
