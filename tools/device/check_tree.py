"""Check this copy of the project against the commit it was sent from: every tracked file's git
blob hash (sha1 of "blob <size>\\0<bytes>") against `git ls-files -s` taken by the sender."""
import hashlib, sys
from pathlib import Path
bad = []
for line in Path(".devrun/manifest.txt").read_text().splitlines():
    meta, path = line.split("\t", 1)
    mode, sha, _ = meta.split()
    if path.startswith("book/"):   # the book's outputs are rewritten by the runs themselves
        continue
    p = Path(path)
    if mode == "120000" or not p.exists():
        if not p.exists(): bad.append(f"missing {path}")
        continue
    data = p.read_bytes()
    if hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() != sha:
        bad.append(f"differs {path}")
print("tree check:", "OK" if not bad else f"{len(bad)} files differ: {bad[:5]}")
sys.exit(1 if bad else 0)
