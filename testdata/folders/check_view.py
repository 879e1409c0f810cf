"""Checks the root safetensors files of a ztfs mount with NumPy alone,
independently of ztfs: every tensor they hold, memory-mapped as a loader
maps it, equals the tensor's tensor.npy in value (bf16, f16 and f8 are kept
in the view and widened in tensor.npy), and the headers follow the
safetensors rules (offsets contiguous from 0, no holes, string metadata).

usage: check_view.py MOUNTPOINT [--computed]   (--computed: a view ztfs
made, whose data must start at a multiple of 4096 bytes)
Prints "checked N tensors in K files" and exits 1 on the first mismatch.
"""
import json, os, struct, sys
import numpy as np

def fail(msg):
    print("check_view.py: " + msg, file=sys.stderr)
    sys.exit(1)

def f8_table(exp_bits, man_bits, bias, fn):
    out = np.zeros(256, dtype=np.float64)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e = (b >> man_bits) & ((1 << exp_bits) - 1)
        m = b & ((1 << man_bits) - 1)
        if fn(e, m):
            out[b] = np.nan
        elif e == 0:
            out[b] = s * m / (1 << man_bits) * 2.0 ** (1 - bias)
        elif exp_bits == 5 and e == 31:
            out[b] = s * np.inf if m == 0 else np.nan
        else:
            out[b] = s * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return out

E4M3 = f8_table(4, 3, 7, lambda e, m: e == 15 and m == 7)
E5M2 = f8_table(5, 2, 15, lambda e, m: False)
E8M0 = np.array([np.nan if b == 255 else 2.0 ** (b - 127) for b in range(256)])
F4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)

PLAIN = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
         "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?", "C64": "<c8"}

def values(dtype, raw, shape):
    if dtype in PLAIN:
        return np.frombuffer(raw, dtype=PLAIN[dtype]).reshape(shape)
    u8 = np.frombuffer(raw, dtype=np.uint8)
    if dtype == "BF16":
        v = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    elif dtype == "F8_E4M3":
        v = E4M3[u8]
    elif dtype == "F8_E5M2":
        v = E5M2[u8]
    elif dtype == "F8_E8M0":
        v = E8M0[u8]
    elif dtype == "F4":
        v = np.stack([F4[u8 & 15], F4[u8 >> 4]], axis=-1).reshape(-1)
    else:
        fail("unknown dtype " + dtype)
    return v.reshape(shape)

def header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    return n, h

def main():
    mnt, computed = sys.argv[1], "--computed" in sys.argv[2:]
    manifest = json.load(open(os.path.join(mnt, "manifest.json")))
    by_name = {}
    for name, t in manifest["tensors"].items():
        by_name[name] = t
        by_name[t["path"][len("tensors/"):]] = t  # Tensogram: the path names it
    if os.path.exists(os.path.join(mnt, "model.safetensors.index.json")):
        index = json.load(open(os.path.join(mnt, "model.safetensors.index.json")))
        files = sorted(set(index["weight_map"].values()))
    else:
        files, index = ["model.safetensors"], None
    checked = 0
    for fname in files:
        path = os.path.join(mnt, fname)
        n, h = header(path)
        size = os.path.getsize(path)
        if computed and (8 + n) % 4096:
            fail(f"{fname}: data starts at {8 + n}, not a multiple of 4096")
        meta = h.pop("__metadata__", {})
        if not all(isinstance(v, str) for v in meta.values()):
            fail(f"{fname}: __metadata__ values must be strings")
        if computed and meta.get("format") != "pt":
            fail(f"{fname}: __metadata__ format is {meta.get('format')!r}")
        spans = sorted((t["data_offsets"][0], t["data_offsets"][1], k) for k, t in h.items())
        end = 0
        for b, e, k in spans:
            if b != end:
                fail(f"{fname}: {k} starts at {b}, the previous tensor ends at {end}")
            end = e
        if 8 + n + end != size:
            fail(f"{fname}: data ends at {8 + n + end}, the file has {size} bytes")
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        for k, t in h.items():
            if index is not None and index["weight_map"].get(k) != fname:
                fail(f"index puts {k} in {index['weight_map'].get(k)}, it is in {fname}")
            b, e = t["data_offsets"]
            got = values(t["dtype"], mm[8 + n + b: 8 + n + e].tobytes(), t["shape"])
            want = np.load(os.path.join(mnt, by_name[k]["path"], "tensor.npy"), mmap_mode="r")
            if got.shape != want.shape:
                fail(f"{k}: shape {got.shape}, tensor.npy {want.shape}")
            if want.dtype.kind == "f":
                w = np.asarray(want)
                if not np.array_equal(np.asarray(got).astype(w.dtype), w, equal_nan=True):
                    fail(f"{k}: {t['dtype']} values differ from tensor.npy ({want.dtype})")
            elif not np.array_equal(got, np.asarray(want), equal_nan=want.dtype.kind == "c"):
                fail(f"{k}: values differ from tensor.npy")
            checked += 1
    print(f"checked {checked} tensors in {len(files)} files")

main()
