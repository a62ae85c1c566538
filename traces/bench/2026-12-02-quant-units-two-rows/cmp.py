"""Two `decoder run --dump` files (safetensors: `logits` f32 and `ids` i64) compared: the relative
RMS of A's logits against B's, and how many leading greedy tokens they share: the CHECK lines of
ab.txt here and of ../2026-12-02-quant-int8-dot/xq.txt.

    python3 cmp.py A.st B.st
"""
import array
import json
import math
import struct
import sys


def load(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]

    def tensor(name, code):
        lo, hi = header[name]["data_offsets"]
        a = array.array(code)
        a.frombytes(body[lo:hi])
        return a

    return tensor("logits", "f"), list(tensor("ids", "q"))


a, ids_a = load(sys.argv[1])
b, ids_b = load(sys.argv[2])
num = sum((x - y) ** 2 for x, y in zip(a, b))
den = sum(y * y for y in b)
same = next((k for k, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), len(ids_a))
print(f"rel rms {math.sqrt(num / den):.2e}, same ids {same} of {len(ids_a)}")
