# Ran once (2026-12-02) on the H200 machine, from the repository root of a copy of the checkout.
# Forgery 2, all of it: the kernel computes a - b, and the record is given the
# new code's hash, as a forger would. (Run from the repository root.)
import json, pathlib, re, sys
sys.path.insert(0, "code")
from cudabook import hashing, listings
lst = listings.find("first_kernel/add_vectorized")
cu = lst.cu.read_text()
lst.cu.write_text(cu.replace("x.x + y.x", "x.x - y.x"))
d = json.loads(lst.record_path.read_text())
d["hash"] = hashing.content_hash(lst)
lst.record_path.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n")
print("forged:", lst.record_path)
# ...and the chapter's notebook given the new cell sources and hashes.
from cudabook import notebooks
nbp = notebooks.path(lst.chapter)
stored, fresh = json.loads(nbp.read_text()), notebooks.build(lst.chapter)
for old, new in zip(stored["cells"], fresh["cells"]):
    old["source"] = new["source"]
stored["metadata"]["cudabook"]["listings"] = fresh["metadata"]["cudabook"]["listings"]
nbp.write_text(json.dumps(stored, indent=1) + "\n")
print("forged:", nbp)
