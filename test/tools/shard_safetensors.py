"""Split one .safetensors file into HF-style shards + model.safetensors.index.json (no torch).

Tensors go in sorted-name order, a new shard starting when the next tensor would pass
MAX_BYTES; the same rule make_mixtral_fixture.py uses for hf-sharded/.  The device run's
output is capped at a few files, so the committed hf-sharded/ copy was rebuilt with this.
Usage: python3 shard_safetensors.py IN.safetensors OUTDIR [MAX_BYTES=200000]
"""
import json, os, struct, sys

src, out = sys.argv[1], sys.argv[2]
limit = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
body = raw[8 + n:]
names = sorted(head)
shards, cur, size = [], [], 0
for k in names:
    b, e = head[k]["data_offsets"]
    if cur and size + (e - b) > limit:
        shards.append(cur); cur, size = [], 0
    cur.append(k); size += e - b
shards.append(cur)
os.makedirs(out, exist_ok=True)
wmap, total = {}, 0
for j, keys in enumerate(shards):
    fn = f"model-{j + 1:05d}-of-{len(shards):05d}.safetensors"
    h, data, off = {"__metadata__": {"format": "pt"}}, bytearray(), 0
    for k in keys:
        b, e = head[k]["data_offsets"]
        h[k] = {"dtype": head[k]["dtype"], "shape": head[k]["shape"], "data_offsets": [off, off + e - b]}
        data += body[b:e]; off += e - b
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(out, fn), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)
    wmap.update({k: fn for k in keys}); total += off
json.dump({"metadata": {"total_size": total}, "weight_map": wmap},
          open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
print(out, len(shards), "shards", total, "bytes")
