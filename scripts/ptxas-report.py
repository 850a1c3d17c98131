#!/usr/bin/env python3
"""Registers and local memory of every kernel of the PTX module on sm_90, without a GPU.

The driver compiles the PTX module (sm_80) for the GPU it meets; spills and
registers are decided there, not by rustc. `ferrocm kernels --device cuda`
reports them on a GPU machine. This script gets the same answer here: it runs
NVIDIA's ptxas (from PyPI's nvidia-cuda-nvcc-cu12 wheel, fetched once into
~/.cache/ferrocm) on the module for sm_90 and reads its `-v` report.

    python3 scripts/ptxas-report.py                  # check against the list
    python3 scripts/ptxas-report.py --table          # every kernel, sorted
    python3 scripts/ptxas-report.py --kernel 'qmatvec8_q8_0_f32' --sass
    python3 scripts/ptxas-report.py --arch sm_80 path/to/sm_80.ptx

Without `--table`/`--kernel` it is a check: the kernels that use local memory
(a stack frame or spills) must be exactly those in
kernels/ptxas-local-memory.txt, each with no more bytes than listed; exit 1
on a new one or a larger one, and a note for any listed kernel that no
longer needs local memory (take it off the list). The listed spills are the
ones the launch bounds that measured fastest make (docs/h100-bench.md);
the list keeps a new one from arriving unnoticed.

ptxas 12.9 (pinned below) and the driver's own compiler of a given machine
can differ: on December 6 an H100's driver found 24 kernels with local
memory where ptxas 12.9 finds 25 (it adds the 8-row Q4_K bf16 product, 8
bytes), with frames a few words apart (Q8_0's 8-row product 72 bytes there,
80 here). The list is ptxas's, so that CI reproduces it.
Exits 0 with a message, checking nothing, when ptxas cannot be fetched (no
network).
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(ROOT, "kernels", "ptxas-local-memory.txt")
WHEEL = "nvidia-cuda-nvcc-cu12==12.9.86"
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "ferrocm", "ptxas-12.9.86")


def ptxas():
    exe = os.path.join(CACHE, "nvidia", "cuda_nvcc", "bin", "ptxas")
    if os.path.exists(exe):
        return exe
    os.makedirs(CACHE, exist_ok=True)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", CACHE, WHEEL],
        capture_output=True,
        text=True,
    )
    wheels = glob.glob(os.path.join(CACHE, "*.whl"))
    if r.returncode != 0 or not wheels:
        return None
    with zipfile.ZipFile(wheels[0]) as z:
        for name in z.namelist():
            if name.endswith("/bin/ptxas"):
                z.extract(name, CACHE)
    os.chmod(exe, 0o755)
    return exe


def newest_module():
    found = glob.glob(os.path.join(ROOT, "target", "*", "build", "ferrocm-kernels", "*", "out", "objects", "sm_80.ptx"))
    return max(found, key=os.path.getmtime) if found else None


def report(exe, module, arch, kernel=None, cubin=os.devnull):
    cmd = [exe, f"-arch={arch}", "-v", module, "-o", cubin]
    if kernel:
        cmd[1:1] = ["-e", kernel]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ptxas failed:\n{r.stderr[-4000:]}")
    kernels, current = {}, None
    for line in r.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = m.group(1)
            kernels[current] = {"registers": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0}
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            k = kernels[current]
            k["stack"], k["spill_stores"], k["spill_loads"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            kernels[current]["registers"] = int(m.group(1))
            current = None
    return kernels


def uses_local(k):
    return k["stack"] or k["spill_stores"] or k["spill_loads"]


def read_list():
    listed = {}
    for line in open(LIST):
        line = line.split("#")[0].split()
        if line:
            listed[line[0]] = int(line[1])
    return listed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("module", nargs="?", help="the PTX module (default: the newest built one)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--table", action="store_true", help="print every kernel, most registers first")
    ap.add_argument("--kernel", help="compile this entry only and print it")
    ap.add_argument("--sass", action="store_true", help="with --kernel: keep the cubin (/tmp/<kernel>.cubin)")
    args = ap.parse_args()
    module = args.module or newest_module()
    if not module:
        sys.exit("no PTX module: build the kernels first (cargo build -p ferrocm-kernels)")
    exe = ptxas()
    if exe is None:
        print(f"ptxas-report: skipped, could not fetch {WHEEL} from PyPI")
        return 0
    if args.kernel:
        cubin = f"/tmp/{args.kernel}.cubin" if args.sass else os.devnull
        for name, k in report(exe, module, args.arch, args.kernel, cubin).items():
            print(f"{name}: {k['registers']} registers, {k['stack']} B stack, "
                  f"{k['spill_stores']} B spill stores, {k['spill_loads']} B spill loads")
        if args.sass:
            print(f"cubin: {cubin} (cuobjdump -sass from PyPI's nvidia-cuda-cuobjdump with nvidia-cuda-nvdisasm)")
        return 0
    kernels = report(exe, module, args.arch)
    if args.table:
        for name, k in sorted(kernels.items(), key=lambda kv: (-kv[1]["registers"], kv[0])):
            print(f"{k['registers']:4} {k['stack']:5} {k['spill_stores']:5} {k['spill_loads']:5}  {name}")
        print(f"{len(kernels)} kernels; columns: registers, stack bytes, spill store bytes, spill load bytes")
        return 0
    listed = read_list()
    local = {n: k["stack"] for n, k in kernels.items() if uses_local(k)}
    bad = 0
    for name, stack in sorted(local.items()):
        if name not in listed:
            print(f"NEW: {name} uses local memory on {args.arch}: {kernels[name]}")
            bad += 1
        elif stack > listed[name]:
            print(f"GREW: {name}: {stack} B stack, listed {listed[name]}: {kernels[name]}")
            bad += 1
    for name in sorted(set(listed) - set(local)):
        state = "no longer uses local memory" if name in kernels else "is not in the module"
        print(f"note: {name} {state}; take it off {os.path.relpath(LIST, ROOT)}")
    print(f"ptxas {args.arch}: {len(kernels)} kernels, {len(local)} with local memory "
          f"({len(listed)} listed); {bad} unlisted or grown")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
