#!/usr/bin/env python3
"""The kernels whose PTX differs between two builds of the module.

A change to a shared device body can move the registers, and so the speed,
of kernels whose logic it leaves alone. Keep a copy of the module before the
change and compare after it, without a GPU:

    cp "$(ls -t target/debug/build/ferrocm-kernels/*/out/objects/sm_80.ptx | head -1)" /tmp/before.ptx
    # ... change, `cargo build -p ferrocm-kernels` ...
    python3 scripts/ptx-diff.py /tmp/before.ptx \
        "$(ls -t target/debug/build/ferrocm-kernels/*/out/objects/sm_80.ptx | head -1)"

Entries are compared one by one, as text, after renaming rustc's anonymous
constants (`anon_$_<hash>_$_<n>`, numbered in emission order, so any change
renumbers them). Prints the entries added, removed and changed; exits 1 when
any changed, 0 when none did. `--diff NAME` prints that entry's diff.
"""
import difflib
import re
import sys


def entries(path):
    text = open(path).read()
    text = re.sub(r"anon_\$_[0-9a-f]+_\$_\d+", "ANON", text)
    # Call sequence numbers count across the module: one kernel's calls
    # renumber every later kernel's comments.
    text = re.sub(r"// callseq \d+", "// callseq N", text)
    # Block labels carry the function's number in the module.
    text = re.sub(r"\$L__BB\d+_", "$L__BBF_", text)
    text = re.sub(r"\bBB\d+_", "BBF_", text)
    # Comments are padded to a column that the label's width moves.
    text = re.sub(r"[ \t]+//", " //", text)
    out = {}
    for m in re.finditer(r"\.visible \.entry (\w+)\(", text):
        end = text.find("\n}\n", m.start())
        out[m.group(1)] = text[m.start() : end if end >= 0 else len(text)]
    return out


def main(argv):
    show = None
    if "--diff" in argv:
        i = argv.index("--diff")
        show = argv[i + 1]
        argv = argv[:i] + argv[i + 2 :]
    if len(argv) != 2:
        sys.exit(__doc__)
    old, new = entries(argv[0]), entries(argv[1])
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    print(f"{len(old)} entries before, {len(new)} after")
    for label, names in (("added", added), ("removed", removed), ("changed", changed)):
        print(f"{label}: {len(names)}")
        for name in names:
            print(f"  {name}")
    if show:
        diff = difflib.unified_diff(
            old.get(show, "").split("\n"), new.get(show, "").split("\n"), lineterm="", n=2
        )
        print("\n".join(diff))
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
