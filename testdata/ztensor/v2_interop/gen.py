#!/usr/bin/python3
"""Write zTensor v2 interoperability files for ztfs, with independently computed expectations.

    /usr/bin/python3 gen.py OUTDIR

Writes OUTDIR/*.zt, OUTDIR/expected.json and OUTDIR/expected/<file stem>/<n>.npy, then
re-reads every file with ztread.py (a separate reader) and stops with an error if any file
is not what it is meant to be. See README.md. Written from the zTensor v2 specification
(Draft 4), its profiles, and the readings in docs/formats/ztensor-v2.md only.
"""

import hashlib
import json
import math
import os
import shutil
import struct
import sys
import unicodedata

import cbor2
import numpy as np
import xxhash
import zstandard

sys.dont_write_bytecode = True  # no __pycache__ next to the sources
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ztread  # noqa: E402  (used only to check the output, see verify())

MAGIC = b"\x89ZT2\r\n\x1a\n"
SEEKABLE = "zt.zstd-seekable/1"
K4, K64 = 4096, 65536
WIDTH = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1,
         "u64": 8, "u32": 4, "u16": 2, "u8": 1}
NP = {"f64": "<f8", "f32": "<f4", "f16": "<f2", "bf16": "<u2", "i64": "<i8", "i32": "<i4",
      "i16": "<i2", "i8": "|i1", "u64": "<u8", "u32": "<u4", "u16": "<u2", "u8": "|u1"}
QNAN = 0x7FC00000


def roundup(x, a):
    return (x + a - 1) // a * a


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def digest(algo, b):
    if algo == "xxh3":
        return "xxh3:%016x" % xxhash.xxh3_64_intdigest(b)
    return "sha256:" + sha256(b)


def prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def f32bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def bits_f32(bits):
    return np.array(bits, np.uint32).view(np.float32)


# --------------------------------------------------------------------------- CBOR

def cbor(value):
    """Deterministic CBOR via cbor2, then checked: re-parsed by a strict decoder that
    refuses non-shortest heads and floats, unsorted or duplicate keys, tags and
    indefinite lengths, and re-encoded to the same bytes."""
    b = cbor2.dumps(value, canonical=True)
    ztread.cbor_decode(b)  # raises ZtError on anything non-deterministic
    if cbor2.dumps(cbor2.loads(b), canonical=True) != b:
        raise AssertionError("canonical CBOR does not round-trip")
    return b


# --------------------------------------------------------------------------- container

class Heap:
    """The L0 container: magic, blobs at multiples of `align`, zero padding, footer."""

    def __init__(self, align, base=None):
        assert align % K4 == 0
        self.align = align
        self.buf = bytearray(base) if base is not None else bytearray(MAGIC)

    def put(self, data):
        off = max(roundup(len(self.buf), self.align), self.align)
        self.buf += bytes(off - len(self.buf))
        self.buf += data
        return [off, len(data)]

    def finish(self, manifest=None, raw=None, version=2, reserved=0):
        if manifest is None and raw is None:  # data shard
            footer = struct.pack("<QQQII", 0, 0, 0, version, reserved)
        else:
            mb = raw if raw is not None else cbor(manifest)
            off, ln = self.put(mb)
            self.manifest_blob = (off, ln)
            footer = struct.pack("<QQQII", off, ln, xxhash.xxh3_64_intdigest(mb), version, reserved)
        self.buf += footer + MAGIC
        return bytes(self.buf)


# --------------------------------------------------------------------------- zstd seekable

def seekable(data, frame=K4, content_size=False, table_checksums=True, sizes=None,
             frame_checksum=True, table_sizes=None, corrupt=None):
    """Encode `data` as a zstd seekable stream (zt.zstd-seekable/1).

    content_size / frame_checksum: bool or function of the frame index.
    sizes: explicit decoded sizes of the frames (default: `frame` bytes each, last shorter).
    table_sizes: decoded sizes written into the seek table instead of the true ones.
    corrupt: (frame index, byte offset within the frame) to flip after encoding."""
    if sizes is None:
        sizes = [min(frame, len(data) - i) for i in range(0, len(data), frame)]
    assert sum(sizes) == len(data)
    chunks, pos = [], 0
    for s in sizes:
        chunks.append(data[pos:pos + s])
        pos += s
    frames = []
    for i, ch in enumerate(chunks):
        cs = content_size(i) if callable(content_size) else content_size
        ck = frame_checksum(i) if callable(frame_checksum) else frame_checksum
        c = zstandard.ZstdCompressor(level=3, write_checksum=ck, write_content_size=cs)
        frames.append(bytearray(c.compress(ch)))
    if corrupt is not None:
        fi, at = corrupt
        frames[fi][at] ^= 0x5A
    dsizes = table_sizes if table_sizes is not None else [len(c) for c in chunks]
    entries = b""
    for f, ch, ds in zip(frames, chunks, dsizes):
        entries += struct.pack("<II", len(f), ds)
        if table_checksums:
            entries += struct.pack("<I", xxhash.xxh64_intdigest(ch) & 0xFFFFFFFF)
    tail = entries + struct.pack("<IBI", len(frames), 0x80 if table_checksums else 0, 0x8F92EAB1)
    table = struct.pack("<II", 0x184D2A5E, len(tail)) + tail
    return b"".join(bytes(f) for f in frames) + table


# --------------------------------------------------------------------------- values

def minifloat_bits(code, ebits, mbits, bias, kind):
    """float32 bit pattern of one small-float code, from the format's bit definition.
    NaN becomes the quiet NaN 0x7FC00000 carrying the code's sign bit (fnuz: positive)."""
    s = (code >> (ebits + mbits)) & 1
    e = (code >> mbits) & ((1 << ebits) - 1)
    m = code & ((1 << mbits) - 1)
    emax, mmax = (1 << ebits) - 1, (1 << mbits) - 1
    if kind == "fnuz" and code == 0x80:
        return QNAN
    if kind == "ieee" and e == emax:
        return (s << 31) | (0x7F800000 if m == 0 else QNAN)
    if kind == "fn" and e == emax and m == mmax:
        return (s << 31) | QNAN
    v = math.ldexp(m, 1 - bias - mbits) if e == 0 else math.ldexp((1 << mbits) | m, e - bias - mbits)
    return f32bits(-v if s else v)


F8 = {"f8_e4m3fn": (4, 3, 7, "fn"), "f8_e5m2": (5, 2, 15, "ieee"),
      "f8_e4m3fnuz": (4, 3, 8, "fnuz"), "f8_e5m2fnuz": (5, 2, 16, "fnuz")}


def f8_table(t):
    if t == "f8_e8m0":
        return [QNAN if b == 0xFF else f32bits(math.ldexp(1.0, b - 127)) for b in range(256)]
    return [minifloat_bits(c, *F8[t]) for c in range(256)]


F4 = [minifloat_bits(c, 2, 1, 1, "none") for c in range(16)]


def selftest_tables():
    t = {k: f8_table(k) for k in list(F8) + ["f8_e8m0"]}
    f = lambda b: struct.unpack("<f", struct.pack("<I", b))[0]
    assert f(t["f8_e4m3fn"][0x7E]) == 448 and f(t["f8_e4m3fn"][0x01]) == 2.0 ** -9
    assert f(t["f8_e4m3fn"][0x08]) == 2.0 ** -6 and t["f8_e4m3fn"][0x80] == 0x80000000
    assert t["f8_e4m3fn"][0x7F] == QNAN and t["f8_e4m3fn"][0xFF] == 0xFFC00000
    assert f(t["f8_e5m2"][0x7B]) == 57344 and t["f8_e5m2"][0x7C] == 0x7F800000
    assert f(t["f8_e5m2"][0x01]) == 2.0 ** -16 and t["f8_e5m2"][0xFE] == 0xFFC00000
    assert f(t["f8_e4m3fnuz"][0x7F]) == 240 and f(t["f8_e4m3fnuz"][0x01]) == 2.0 ** -10
    assert t["f8_e4m3fnuz"][0x80] == QNAN and f(t["f8_e4m3fnuz"][0xFF]) == -240
    assert f(t["f8_e5m2fnuz"][0x7F]) == 57344 and f(t["f8_e5m2fnuz"][0x7C]) == 32768
    assert f(t["f8_e5m2fnuz"][0x01]) == 2.0 ** -17 and t["f8_e5m2fnuz"][0x80] == QNAN
    assert f(t["f8_e8m0"][127]) == 1 and f(t["f8_e8m0"][0]) == 2.0 ** -127
    assert f(t["f8_e8m0"][254]) == 2.0 ** 127
    assert [f(F4[c]) for c in range(16)] == [0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6]
    assert F4[8] == 0x80000000
    # the reader's vectorised decoders agree with these tables on every code
    for k in t:
        got = ztread.decode_f8(k, np.arange(256, dtype=np.uint8)).view(np.uint32).tolist()
        assert got == t[k], k
    assert ztread.decode_f4(np.arange(16, dtype=np.uint8)).view(np.uint32).tolist() == F4


def pack_nibbles(codes):
    codes = list(codes)
    if len(codes) % 2:
        codes.append(0)
    return bytes(codes[i] | (codes[i + 1] << 4) for i in range(0, len(codes), 2))


def typed(ltype, codes, shape):
    """(stored bytes, expected npy array) for codes of a byte-sized logical type."""
    codes = [int(c) for c in codes]
    if ltype == "bool":
        return bytes(codes), np.array(codes, np.uint8).astype(np.bool_).reshape(shape)
    if ltype == "f4_e2m1":
        return pack_nibbles(codes), bits_f32([F4[c] for c in codes]).reshape(shape)
    tab = f8_table(ltype)
    return bytes(codes), bits_f32([tab[c] for c in codes]).reshape(shape)


def to_json(v):
    """Attribute value as ztfs renders it in manifest.json."""
    if isinstance(v, bytes):
        return {"bytes_hex": v.hex()}
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, dict):
        return {k: to_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [to_json(x) for x in v]
    return v


# --------------------------------------------------------------------------- files

class P:
    """One part: its manifest map, its expected.json entry, its blob reference."""

    def __init__(self, m, e, ref):
        self.m, self.e, self.ref = m, e, ref


class File:
    """Builds one .zt file and its expected.json entry."""

    def __init__(self, gen, fname, desc, align=K4, attributes=None):
        self.gen, self.fname, self.desc = gen, fname, desc
        self.heap = Heap(align)
        self.objects = {}
        self.tensors = {}
        self.attributes = attributes
        self.shard_table = {}
        self.shard_heaps = {}
        self.shard_files = {}
        self.extra_root = {}
        self.allow = []  # non-padding regions that no reference covers (appended files)

    @property
    def stem(self):
        return self.fname[:-3]

    def data_shard(self, name, align=K4):
        self.shard_heaps[name] = Heap(align)
        return name

    def part(self, dtype, data, type=None, enc=None, dig=None, shard=None, ref=None,
             stored=None, unknown_encoding=None, extra=None):
        data = bytes(data)
        if unknown_encoding is not None:
            stored = bytes(stored)
        elif stored is None:
            stored = seekable(data, **enc) if enc is not None else data
        if ref is None:
            heap = self.heap if shard is None else self.shard_heaps[shard]
            ref = heap.put(stored)
        m = {"dtype": dtype, "blob": list(ref)}
        if type is not None:
            m["type"] = type
        if shard is not None:
            m["shard"] = shard
        if enc is not None:
            m["encoding"] = SEEKABLE
            m["decoded_length"] = len(data)
        if unknown_encoding is not None:
            m["encoding"], m["decoded_length"] = unknown_encoding
        if dig:
            m["digest"] = digest(dig, data)
        if extra:
            m.update(extra)
        e = {"size": len(data), "sha256": sha256(data),
             "encoding": "raw" if "encoding" not in m else m["encoding"],
             "digest": m.get("digest"), "read_error": None}
        if unknown_encoding is not None:  # the part file holds the stored bytes
            e["size"], e["sha256"] = len(stored), sha256(stored)
        return P(m, e, ref)

    def obj(self, name, shape, layout, parts, attrs=None, npy=None, npy_error=None,
            no_npy=None, extra=None):
        assert name not in self.objects
        assert unicodedata.is_normalized("NFC", name)
        o = {"shape": list(shape), "layout": layout, "parts": {k: p.m for k, p in parts.items()}}
        if attrs is not None:
            o["attributes"] = attrs
        if extra:
            o.update(extra)
        self.objects[name] = o
        t = {"shape": list(shape), "layout": layout,
             "attributes": to_json(attrs) if attrs is not None else {},
             "parts": {k: p.e for k, p in parts.items()},
             "npy": None, "npy_error": npy_error}
        if no_npy:
            t["no_npy"] = no_npy
        else:
            assert npy is not None or npy_error is not None
            t["_array"] = npy
        self.tensors[name] = t
        return o

    def dense(self, name, shape, dtype, data, npy, type=None, enc=None, dig=None, shard=None,
              attrs=None, ref=None, no_npy=None):
        return self.obj(name, shape, "dense",
                        {"data": self.part(dtype, data, type=type, enc=enc, dig=dig, shard=shard, ref=ref)},
                        attrs=attrs, npy=npy, no_npy=no_npy)

    def manifest(self):
        m = {"objects": self.objects}
        if self.attributes is not None:
            m["attributes"] = self.attributes
        if self.shard_table:
            m["shards"] = self.shard_table
        m.update(self.extra_root)
        return m

    def write_shards(self, digests, size_delta=None):
        for name, heap in self.shard_heaps.items():
            img = heap.finish()
            fn = f"{self.stem}-{name}.zt"
            self.gen.write(fn, img)
            self.shard_files[name] = fn
            self.gen.data_shards[fn] = self.fname
            size = len(img) + (size_delta or {}).get(name, 0)
            self.shard_table[name] = {"size": size, "digest": digest(digests[name], img)}

    def write(self, reject=None, raw=None, reserved=0):
        img = self.heap.finish(None if raw is not None else self.manifest(), raw=raw, reserved=reserved)
        self.gen.write(self.fname, img)
        self.gen.files[self.fname] = self
        self.reject = reject
        return img


class Gen:
    def __init__(self, out):
        self.out = out
        self.files = {}
        self.data_shards = {}
        self.written = {}
        self.rng = np.random.default_rng(20261125)
        self.n = 0

    def align(self):
        """Alternate 4 KiB and 64 KiB placement across files."""
        self.n += 1
        return K64 if self.n % 3 == 0 else K4

    def write(self, fname, img):
        assert fname not in self.written, fname
        with open(os.path.join(self.out, fname), "wb") as f:
            f.write(img)
        self.written[fname] = len(img)

    def new(self, fname, desc, align=None, attributes=None):
        return File(self, fname, desc, align or self.align(), attributes)

    def expected(self):
        files = {}
        for fname, f in sorted(self.files.items()):
            e = {"description": f.desc}
            if f.shard_files:
                e["shard_files"] = dict(sorted(f.shard_files.items()))
            if f.reject:
                e["expect"] = "reject"
                e.update(f.reject)
                files[fname] = e
                continue
            e["expect"] = "valid"
            e["attributes"] = to_json(f.attributes) if f.attributes is not None else {}
            tensors = {}
            os.makedirs(os.path.join(self.out, "expected", f.stem), exist_ok=True)
            for i, (name, t) in enumerate(f.tensors.items()):
                t = dict(t)
                arr = t.pop("_array", None)
                if arr is not None:
                    rel = f"expected/{f.stem}/{i}.npy"
                    np.save(os.path.join(self.out, rel), arr.copy(order="C"))
                    t["npy"] = rel
                tensors[name] = t
            e["tensors"] = tensors
            files[fname] = e
        return {
            "schema": 1,
            "spec": "zTensor v2 Draft 4 with profiles; readings of docs/formats/ztensor-v2.md",
            "files": files,
            "data_shards": dict(sorted(self.data_shards.items())),
        }


# --------------------------------------------------------------------------- cases

def case_dense_storage(g):
    r = g.rng
    f64 = np.concatenate([np.array([0.0, -0.0, 1.0, -2.5, math.pi, 5e-324, -2.2250738585072014e-308,
                                    2.2250738585072014e-308, 1.7976931348623157e308, math.inf, -math.inf]),
                          np.frombuffer(struct.pack("<3Q", 0x7FF8000000000000, 0x7FF0000000000001,
                                                    0xFFF8000000000123), "<f8"),
                          r.standard_normal(6) * 1e3])
    f32 = np.concatenate([np.array([0.0, -0.0, 1.0, -2.5, 1e-45, -1.1754944e-38, 1.1754942e-38,
                                    3.4028235e38, np.inf, -np.inf], np.float32),
                          bits_f32([0x7FC00000, 0x7F800001, 0xFFC00001, 0x7FFFFFFF]),
                          r.standard_normal(10).astype(np.float32)])
    f16b = np.array([0x0000, 0x8000, 0x3C00, 0xC100, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF,
                     0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE01, 0x7FFF] + list(r.integers(0, 0x7C00, 8)), np.uint16)
    bf16b = np.array([0x0000, 0x8000, 0x3F80, 0xBFC0, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F,
                      0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1, 0x4049] + list(r.integers(0, 0x7F80, 8)), np.uint16)
    cases = {
        "f64": (f64.reshape(4, 5), None),
        "f32": (f32.reshape(6, 4), None),
        "f16": (f16b.view(np.float16).reshape(4, 6), None),
        "bf16": (bf16b.reshape(3, 8), (bf16b.astype(np.uint32) << 16).view(np.float32).reshape(3, 8)),
    }
    for dt, lo, hi in [("i64", -2 ** 63, 2 ** 63 - 1), ("i32", -2 ** 31, 2 ** 31 - 1),
                       ("i16", -2 ** 15, 2 ** 15 - 1), ("i8", -128, 127), ("u64", 0, 2 ** 64 - 1),
                       ("u32", 0, 2 ** 32 - 1), ("u16", 0, 2 ** 16 - 1), ("u8", 0, 255)]:
        special = [lo, hi, 0, 1] + ([-1, lo + 1] if lo else [hi - 1, 2])
        vals = special + [int(x) for x in r.integers(lo, hi, 14, dtype=np.int64 if lo else np.uint64,
                                                     endpoint=True)]
        cases[dt] = (np.array(vals, dtype=NP[dt]).reshape(4, 5), None)
    digs = [None, "xxh3", "sha256"]
    for i, (dt, (arr, npy)) in enumerate(cases.items()):
        f = g.new(f"dense-{dt}.zt", f"dense {dt} {list(arr.shape)} with edge values")
        arr = np.ascontiguousarray(arr.astype(NP[dt]))
        f.dense("x", arr.shape, dt, arr.tobytes(), npy if npy is not None else arr, dig=digs[i % 3])
        f.write()


def case_logical(g):
    r = g.rng
    f = g.new("dense-bool.zt", "logical type bool over u8, [3,7]")
    data, npy = typed("bool", r.integers(0, 2, 21), [3, 7])
    f.dense("mask", [3, 7], "u8", data, npy, type="bool", dig="xxh3")
    f.write()
    for t in ["f8_e4m3fn", "f8_e5m2", "f8_e4m3fnuz", "f8_e5m2fnuz", "f8_e8m0"]:
        f = g.new(f"dense-{t}.zt", f"logical type {t}: every one of the 256 codes, [16,16], widened to f32")
        data, npy = typed(t, range(256), [16, 16])
        f.dense("all_codes", [16, 16], "u8", data, npy, type=t, dig="sha256")
        codes = r.integers(0, 256, 12)
        data, npy = typed(t, codes, [3, 4])
        f.dense("random", [3, 4], "u8", data, npy, type=t)
        f.write()
    f = g.new("dense-f4_e2m1-even.zt", "f4_e2m1 [4,8]: 32 elements in 16 bytes, low nibble first")
    codes = list(range(16)) + list(r.integers(0, 16, 16))
    data, npy = typed("f4_e2m1", codes, [4, 8])
    f.dense("w", [4, 8], "u8", data, npy, type="f4_e2m1", dig="xxh3")
    f.write()
    f = g.new("dense-f4_e2m1-odd.zt", "f4_e2m1 [3,5]: 15 elements in 8 bytes, last high nibble zero")
    codes = [15, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    data, npy = typed("f4_e2m1", codes, [3, 5])
    assert len(data) == 8 and data[-1] >> 4 == 0
    f.dense("w", [3, 5], "u8", data, npy, type="f4_e2m1")
    f.write()
    f = g.new("dense-complex.zt", "complex64 [2,3] over f32 and complex128 [4] over f64, interleaved")
    c64 = np.array([1 + 2j, -0.0 - 0.0j, complex(math.inf, math.nan), 3.5 - 1e-40j, 1e30 + 1j, -1 - 1j],
                   np.complex64).reshape(2, 3)
    f.dense("c64", [2, 3], "f32", c64.tobytes(), c64, type="complex64", dig="xxh3")
    c128 = np.array([1e300 + 1e-300j, complex(-math.inf, 0), complex(math.nan, -math.nan), 0.1 + 0.2j],
                    np.complex128)
    f.dense("c128", [4], "f64", c128.tobytes(), c128, type="complex128", dig="sha256")
    f.write()
    f = g.new("dense-scalar.zt", "shape [] scalars: f32, bf16, bool and f4_e2m1 (one element each)")
    s = np.array(3.5, np.float32)
    f.dense("f32", [], "f32", s.tobytes(), s)
    f.dense("bf16", [], "bf16", struct.pack("<H", 0xC0A0), bits_f32(0xC0A00000).reshape(()))
    d, n = typed("bool", [1], [])
    f.dense("bool", [], "u8", d, n, type="bool")
    d, n = typed("f4_e2m1", [0xB], [])
    f.dense("f4", [], "u8", d, n, type="f4_e2m1")
    f.write()
    f = g.new("dense-zero-size.zt", "zero-element tensors: f32 [0,4], f4_e2m1 [3,0], i64 [0] (zero-length blobs)")
    f.dense("f32", [0, 4], "f32", b"", np.zeros((0, 4), np.float32), dig="xxh3")
    f.dense("f4", [3, 0], "u8", b"", np.zeros((3, 0), np.float32), type="f4_e2m1")
    f.dense("i64", [0], "i64", b"", np.zeros((0,), np.int64), dig="sha256")
    f.write()
    f = g.new("dense-rank5.zt", "i16 [2,3,1,4,2] and f64 [1,1,1,1,3]")
    a = (np.arange(48, dtype=np.int16) * 397 - 9000).reshape(2, 3, 1, 4, 2)
    f.dense("r5", a.shape, "i16", a.tobytes(), a)
    b = np.array([1.5, -2.25, 1e-310]).reshape(1, 1, 1, 1, 3)
    f.dense("ones", b.shape, "f64", b.tobytes(), b)
    f.write()


def case_zstd(g):
    r = g.rng
    f = g.new("zstd-f32-multiframe.zt",
              "f32 [100,103] as zt.zstd-seekable/1: 4 KiB frames (11), no content size, seek table with checksums")
    a = (np.sin(np.arange(10300) / 50.0) * 100).astype(np.float32).round(1).reshape(100, 103)
    f.dense("w", a.shape, "f32", a.tobytes(), a, enc=dict(frame=K4), dig="xxh3")
    f.write()
    f = g.new("zstd-i64-content-size.zt",
              "i64 [3000] in 4 KiB frames with the content-size field, seek table without checksums")
    a = (np.arange(3000, dtype=np.int64) // 7) * -123456789
    f.dense("ids", [3000], "i64", a.tobytes(), a,
            enc=dict(frame=K4, content_size=True, table_checksums=False), dig="sha256")
    f.write()
    f = g.new("zstd-bf16-single-frame.zt", "bf16 [64,64] (8 KiB) as a single frame (frame size limit 1 MiB), "
              "content size, no table checksums")
    b = (r.integers(0x3C00, 0x4100, 4096)).astype(np.uint16).reshape(64, 64)
    f.dense("w", [64, 64], "bf16", b.tobytes(), (b.astype(np.uint32) << 16).view(np.float32),
            enc=dict(frame=1 << 20, content_size=True, table_checksums=False))
    f.write()
    f = g.new("zstd-zero-length.zt", "zero-length parts encoded: seek table with zero frames, decoded_length 0")
    f.dense("f32", [0, 8], "f32", b"", np.zeros((0, 8), np.float32), enc=dict(), dig="xxh3")
    f.dense("u8", [0], "u8", b"", np.zeros((0,), np.uint8), enc=dict(table_checksums=False))
    f.write()
    f = g.new("zstd-last-frame-longer.zt",
              "u16 [9000]: frames of 4096, 4096, 4096 and a longer last one of 5712 bytes; frames alternate "
              "with and without content size")
    a = (np.arange(9000) % 1000).astype(np.uint16)
    f.dense("w", [9000], "u16", a.tobytes(), a,
            enc=dict(sizes=[4096, 4096, 4096, 5712], content_size=lambda i: i % 2 == 1), dig="xxh3")
    f.write()
    f = g.new("zstd-f8-and-f4.zt", "seekable parts of logical types: f8_e5m2 [64,100] and f4_e2m1 [99,99]")
    codes = r.integers(0, 256, 6400)
    d, n = typed("f8_e5m2", codes, [64, 100])
    f.dense("f8", [64, 100], "u8", d, n, type="f8_e5m2", enc=dict(frame=2048), dig="sha256")
    codes = r.integers(0, 16, 99 * 99)
    d, n = typed("f4_e2m1", codes, [99, 99])
    f.dense("f4", [99, 99], "u8", d, n, type="f4_e2m1", enc=dict(frame=K4, content_size=True))
    f.write()


def case_alias(g):
    f = g.new("aliased-tied-weights.zt",
              "tied weights: two bf16 objects and one u16 view share one blob; two objects share one seekable blob",
              align=K64)
    r = g.rng
    b = r.integers(0x3000, 0x4000, 128).astype(np.uint16)
    npy = (b.astype(np.uint32) << 16).view(np.float32).reshape(16, 8)
    p = f.part("bf16", b.tobytes(), dig="xxh3")
    f.obj("embed.weight", [16, 8], "dense", {"data": p}, npy=npy)
    f.obj("lm_head.weight", [16, 8], "dense", {"data": f.part("bf16", b.tobytes(), ref=p.ref, dig="xxh3")},
          npy=npy)
    f.obj("embed.weight.bits", [128], "dense", {"data": f.part("u16", b.tobytes(), ref=p.ref)}, npy=b)
    a = np.arange(5000, dtype=np.int32)
    q = f.part("i32", a.tobytes(), enc=dict(frame=K4))
    f.obj("shared.a", [5000], "dense", {"data": q}, npy=a)
    stored = seekable(a.tobytes(), frame=K4)
    f.obj("shared.b", [50, 100], "dense",
          {"data": f.part("i32", a.tobytes(), enc=dict(frame=K4), ref=q.ref, stored=stored)},
          npy=a.reshape(50, 100))
    f.write()


def case_names(g):
    f = g.new("names.zt", "object names: dots, '/', spaces, NFC accents, CJK, emoji, '.', '..', '%', a tab, 300 bytes")
    names = ["model.layers.0.self_attn.q_proj.weight", "encoder/block 1/weight", "café", "日本語/テンソル",
             "emoji 🙂", ".", "..", "100%", "tab\there", "long." + "x" * 295, "trailing.", " leading space"]
    for i, n in enumerate(names):
        n = unicodedata.normalize("NFC", n)
        a = np.arange(i + 1, dtype=np.float32) + i * 10
        f.dense(n, [i + 1], "f32", a.tobytes(), a)
    f.write()


ROOT_ATTRS = {
    "text": "hello", "unicode": "naïve ☃ 日本", "empty_text": "",
    "neg": -42, "big": 2 ** 64 - 1, "most_negative": -(2 ** 64), "i64_min": -(2 ** 63), "zero": 0,
    "f_1.25": 1.25, "f_0.1": 0.1, "f_1e300": 1e300, "f_single": 100000.0, "f_half_subnormal": 2.0 ** -24,
    "f_nan": math.nan, "f_inf": math.inf, "f_minus_inf": -math.inf,
    "yes": True, "no": False, "nothing": None,
    "bytes": b"\x00\x01\xfe\xff", "empty_bytes": b"",
    "array": [1, "two", 3.5, None, [True, b"\x07"], {"k": -1}],
    "empty_array": [], "empty_map": {},
    "nested": {"a": {"b": {"c": [1, {"d": "deep", "e": [[[2.5]]]}]}}, "z": "end"},
}


def case_attributes(g):
    f = g.new("attributes.zt", "root and object attributes of every CBOR kind a manifest may hold",
              attributes=ROOT_ATTRS)
    a = np.array([1, 2, 3], np.float32)
    f.dense("t", [3], "f32", a.tobytes(), a,
            attrs={"role": "weight", "scale": 0.1, "neg": -7, "big": 2 ** 63, "flags": [False, None],
                   "raw": b"\xde\xad", "map": {"x": 1e300, "y": {"z": "w"}}})
    f.dense("no_attrs", [1], "u8", b"\x09", np.array([9], np.uint8))
    f.write()


def case_unknown(g):
    f = g.new("unknown-vocabulary.zt",
              "unknown layout x.custom/1, unknown logical type x.future/1, unknown encoding x.z/1: the file opens, "
              "those tensors have no tensor.npy; one ordinary tensor beside them")
    r = g.rng
    data = bytes(r.integers(0, 256, 32, dtype=np.uint8))
    sc = np.arange(4, dtype=np.float16)
    f.obj("custom", [8, 8], "x.custom/1",
          {"data": f.part("u8", data), "scales": f.part("f16", sc.tobytes(), enc=dict(frame=K4))},
          attrs={"x.param": 3}, no_npy="unknown layout x.custom/1")
    f.obj("future", [16], "dense", {"data": f.part("u8", bytes(range(8)), type="x.future/1")},
          no_npy="unknown logical type x.future/1")
    f.obj("zcoded", [2], "dense",
          {"data": f.part("f32", np.array([1, 2], np.float32).tobytes(), stored=b"\x01\x02\x03\x04\x05",
                          unknown_encoding=("x.z/1", 8))},
          no_npy="unknown encoding x.z/1")
    a = np.array([0.5, -0.5, 2], np.float32)
    f.dense("plain", [3], "f32", a.tobytes(), a)
    f.write()
    f = g.new("unknown-keys.zt", "unrecognized map keys at root, object and part level must be ignored")
    a = np.array([[1, 2], [3, 4]], np.float32)
    f.obj("t", [2, 2], "dense",
          {"data": f.part("f32", a.tobytes(), dig="xxh3", extra={"x.part-note": 5, "zz": [1, {"q": None}]})},
          npy=a, extra={"x.object-note": "hello", "comment": {"nested": True}})
    f.extra_root = {"x.root-note": {"anything": [1, 2.5, b"\x00"]}, "version": "2.9"}
    f.write()


def case_sharded(g):
    r = g.rng
    f = g.new("sharded.zt",
              "root with shards 00001-of-00002 (xxh3) and 00002-of-00002 (sha256), data shards; one tensor in "
              "the root, some in each shard, one quantized object split across both shards and the root",
              align=K64, attributes={"model": "sharded-test"})
    s1 = f.data_shard("00001-of-00002", align=K4)
    s2 = f.data_shard("00002-of-00002", align=K64)
    a = np.linspace(-1, 1, 16, dtype=np.float32)
    f.dense("lm_head.bias", [16], "f32", a.tobytes(), a, dig="xxh3")
    w0 = r.standard_normal((8, 16)).astype(np.float16)
    f.dense("layers.0.weight", [8, 16], "f16", w0.tobytes(), w0, shard=s1, dig="sha256")
    n0 = r.integers(0x3F00, 0x4000, 4000).astype(np.uint16)
    f.dense("layers.0.norm", [4000], "bf16", n0.tobytes(), (n0.astype(np.uint32) << 16).view(np.float32),
            shard=s1, enc=dict(frame=K4))
    w1 = r.standard_normal((8, 16)).astype(np.float32)
    f.dense("layers.1.weight", [8, 16], "f32", w1.tobytes(), w1, shard=s2, dig="xxh3")
    quant(f, "layers.2.weight", [64, 16], bits=4, gs=32, axis=0, word="u32", order="lsb_first",
          scale_form="f16_factors", scale_dtype="f16", zp={"form": "tensor", "packing": "plain"},
          zeros_dtype="f16", shards={"data": s1, "scales": s2, "zeros": None})
    f.write_shards({s1: "xxh3", s2: "sha256"})
    f.write()

    base = g.new("overlay-base.zt", "a complete .zt file that overlay.zt also uses as its shard 'base'", align=K4)
    e = r.standard_normal((32, 8)).astype(np.float32)
    pe = base.part("f32", e.tobytes(), dig="xxh3")
    base.obj("base.embed", [32, 8], "dense", {"data": pe}, npy=e)
    pb = r.integers(0x3E00, 0x4000, 64).astype(np.uint16)
    pp = base.part("bf16", pb.tobytes(), enc=dict(frame=64))
    pbn = (pb.astype(np.uint32) << 16).view(np.float32).reshape(8, 8)
    base.obj("base.proj", [8, 8], "dense", {"data": pp}, npy=pbn)
    img = base.write()
    f = g.new("overlay.zt",
              "overlay model: its shard 'base' is overlay-base.zt, a full .zt file with its own manifest; the "
              "root stores only its own deltas", align=K4)
    f.shard_table["base"] = {"size": len(img), "digest": digest("sha256", img)}
    f.shard_files["base"] = "overlay-base.zt"
    f.obj("base.embed", [32, 8], "dense", {"data": f.part("f32", e.tobytes(), ref=pe.ref, shard="base")}, npy=e)
    f.obj("proj", [8, 8], "dense",
          {"data": f.part("bf16", pb.tobytes(), ref=pp.ref, shard="base", enc=dict(frame=64),
                          stored=img[pp.ref[0]:pp.ref[0] + pp.ref[1]])}, npy=pbn)
    la = r.standard_normal((8, 4)).astype(np.float32)
    f.dense("lora.a", [8, 4], "f32", la.tobytes(), la, dig="xxh3")
    lb = r.standard_normal((4, 8)).astype(np.float32)
    f.dense("lora.b", [4, 8], "f32", lb.tobytes(), lb)
    f.write()


def case_appended(g):
    f = g.new("appended.zt",
              "two generations: a complete file, then new blobs, a new manifest and a new footer appended; the "
              "first manifest and footer remain as unreferenced bytes; contents are the second generation's",
              align=K4)
    keep = np.array([1.5, 2.5, 3.5, 4.5], np.float32)
    pk = f.part("f32", keep.tobytes(), dig="xxh3")
    f.obj("keep", [4], "dense", {"data": pk}, npy=keep)
    old = np.array([1, 2, 3], np.int32)
    pold = f.part("i32", old.tobytes())
    f.obj("replace", [3], "dense", {"data": pold}, npy=old)
    pdrop = f.part("u8", b"\x01\x02\x03\x04\x05")
    f.obj("drop", [5], "dense", {"data": pdrop}, npy=np.arange(1, 6, dtype=np.uint8))
    f.attributes = {"generation": 1}
    gen1 = f.heap.finish(f.manifest())
    mb1 = f.heap.manifest_blob
    # second generation: everything is appended after the first footer
    f.heap = Heap(K4, base=gen1)
    f.objects, f.tensors = {}, {}
    f.attributes = {"generation": 2}
    f.obj("keep", [4], "dense", {"data": f.part("f32", keep.tobytes(), ref=pk.ref, dig="xxh3")}, npy=keep)
    new = np.array([10, 20, 30], np.int32)
    f.dense("replace", [3], "i32", new.tobytes(), new, dig="sha256")
    h = np.array([0.25, -8], np.float16)
    f.dense("added", [2], "f16", h.tobytes(), h)
    f.allow = [tuple(pold.ref), tuple(pdrop.ref), mb1, (len(gen1) - 40, 40)]
    f.write()


def case_manifest_first(g):
    """The manifest blob at 4096, the data blobs after it: the footer is what finds the manifest."""
    f = g.new("manifest-not-last.zt", "the manifest blob comes first (at 4096) and the data blobs follow it at "
              "65536 and 69632; nothing requires the manifest to be the last blob", align=K4)
    a = np.arange(10, dtype=np.float32) - 4.5
    b = np.array([7, -7], np.int64)
    f.heap.buf += bytes(65536 - len(f.heap.buf))  # data from 65536 on; the manifest goes back to 4096
    f.dense("a", [10], "f32", a.tobytes(), a, dig="xxh3")
    f.dense("b", [2], "i64", b.tobytes(), b)
    mb = cbor(f.manifest())
    assert len(mb) < 65536 - 4096
    img = bytearray(f.heap.buf)
    img[4096:4096 + len(mb)] = mb
    img += struct.pack("<QQQII", 4096, len(mb), xxhash.xxh3_64_intdigest(mb), 2, 0) + MAGIC
    g.write(f.fname, bytes(img))
    g.files[f.fname] = f
    f.reject = None


def case_sparse(g):
    r = g.rng

    def csr(f, name, shape, rows, vdtype, vtype, vals_bytes, npy, idx="u32", enc=None, dig=None):
        ptr, ind = [0], []
        for cols in rows:
            ind += cols
            ptr.append(len(ind))
        it = NP[idx]
        f.obj(name, shape, "zt.sparse_csr/1", {
            "values": f.part(vdtype, vals_bytes, type=vtype, enc=enc, dig=dig),
            "indices": f.part(idx, np.array(ind, it).tobytes(), enc=enc),
            "indptr": f.part(idx, np.array(ptr, it).tobytes()),
        }, npy=npy)

    def dense_of(shape, rows, vals, dtype):
        out = np.zeros(shape, dtype)
        k = 0
        for i, cols in enumerate(rows):
            for c in cols:
                out[i, c] = vals[k]
                k += 1
        return out

    f = g.new("csr-f32-u32.zt", "zt.sparse_csr/1 [5,7], f32 values, u32 indices, row 1 empty")
    rows = [[1, 4], [], [0, 2, 6], [3], [0, 1, 2, 3, 4, 5, 6]]
    v = r.standard_normal(13).astype(np.float32)
    csr(f, "m", [5, 7], rows, "f32", None, v.tobytes(), dense_of([5, 7], rows, v, np.float32), dig="xxh3")
    f.write()
    f = g.new("csr-bf16-u64.zt", "zt.sparse_csr/1 [4,6], bf16 values (incl. -0, NaN), u64 indices, rows 0 and 2 empty")
    rows = [[], [0, 5], [], [1, 2, 3]]
    vb = np.array([0x3F80, 0x8000, 0x7FC0, 0xC2F7, 0x0001], np.uint16)
    vf = (vb.astype(np.uint32) << 16).view(np.float32)
    csr(f, "m", [4, 6], rows, "bf16", None, vb.tobytes(), dense_of([4, 6], rows, vf, np.float32), idx="u64")
    f.write()
    f = g.new("csr-zstd.zt", "zt.sparse_csr/1 [64,300] f32, u32 indices; values and indices "
              "zt.zstd-seekable/1 (4 KiB frames)")
    rows = [sorted(r.choice(300, int(r.integers(0, 60)), replace=False).tolist()) for _ in range(64)]
    rows[5] = []
    nnz = sum(map(len, rows))
    v = (r.standard_normal(nnz) * 10).astype(np.float32)
    csr(f, "m", [64, 300], rows, "f32", None, v.tobytes(), dense_of([64, 300], rows, v, np.float32),
        enc=dict(frame=K4), dig="sha256")
    f.write()
    f = g.new("csr-f8-values.zt", "zt.sparse_csr/1 [3,10] with f8_e4m3fn values (densified as f32), u32 indices")
    rows = [[0, 9], [4], [1, 2, 3]]
    codes = [0x38, 0xB8, 0x7E, 0x01, 0x80, 0x7F]
    d, vals = typed("f8_e4m3fn", codes, [6])
    csr(f, "m", [3, 10], rows, "u8", "f8_e4m3fn", d, dense_of([3, 10], rows, vals, np.float32))
    f.write()

    def coo(f, name, shape, entries, vdtype, vtype, vals_bytes, npy, cdt="u32", enc=None):
        nd = len(shape)
        coords = [e[d] for d in range(nd) for e in entries]  # structure of arrays
        f.obj(name, shape, "zt.sparse_coo/1", {
            "values": f.part(vdtype, vals_bytes, type=vtype),
            "coords": f.part(cdt, np.array(coords, NP[cdt]).tobytes(), enc=enc),
        }, npy=npy)

    def coo_dense(shape, entries, vals, dtype):
        out = np.zeros(shape, dtype)
        for e, v in zip(entries, vals):
            out[tuple(e)] = v
        return out

    def pick(shape, k):
        cells = r.choice(prod(shape), k, replace=False)  # random order: unsorted
        return [list(np.unravel_index(int(c), shape)) for c in cells]

    f = g.new("coo-rank1-complex64-u32.zt", "zt.sparse_coo/1 rank 1 [10], complex64 values, u32 coords, unsorted")
    ent = pick([10], 4)
    v = np.array([1 + 1j, -2j, 3, complex(0, math.inf)], np.complex64)
    coo(f, "v", [10], ent, "f32", "complex64", v.tobytes(), coo_dense([10], ent, v, np.complex64))
    f.write()
    f = g.new("coo-rank2-i16-u64.zt", "zt.sparse_coo/1 rank 2 [6,5], i16 values, u64 coords, unsorted")
    ent = pick([6, 5], 9)
    v = r.integers(-30000, 30000, 9).astype(np.int16)
    coo(f, "m", [6, 5], ent, "i16", None, v.tobytes(), coo_dense([6, 5], ent, v, np.int16), cdt="u64")
    f.write()
    f = g.new("coo-rank3-f32-u32.zt", "zt.sparse_coo/1 rank 3 [3,4,5], f32 values, u32 coords (seekable), unsorted")
    ent = pick([3, 4, 5], 12)
    v = r.standard_normal(12).astype(np.float32)
    coo(f, "t", [3, 4, 5], ent, "f32", None, v.tobytes(), coo_dense([3, 4, 5], ent, v, np.float32),
        enc=dict(frame=64))
    f.write()
    f = g.new("coo-f4-bool-empty.zt",
              "zt.sparse_coo/1 with f4_e2m1 values (odd nnz 5, f32 result), bool values (u64 coords), and nnz 0")
    ent = pick([4, 4], 5)
    d, vals = typed("f4_e2m1", [1, 7, 9, 15, 4], [5])
    coo(f, "f4", [4, 4], ent, "u8", "f4_e2m1", d, coo_dense([4, 4], ent, vals, np.float32))
    ent = pick([3, 3], 4)
    d, vals = typed("bool", [1, 0, 1, 1], [4])
    coo(f, "mask", [3, 3], ent, "u8", "bool", d, coo_dense([3, 3], ent, vals, np.bool_), cdt="u64")
    coo(f, "empty", [3, 4], [], "f32", None, b"", np.zeros((3, 4), np.float32))
    f.write()


def pack_codes(codes, bits, word, order):
    """Pack unsigned codes (python ints, row-major order) into little-endian words."""
    w = WIDTH[word]
    per = 8 * w // bits
    assert len(codes) % per == 0
    mask = (1 << bits) - 1
    out = bytearray()
    for k in range(0, len(codes), per):
        x = 0
        for j in range(per):
            sh = j * bits if order == "lsb_first" else (per - 1 - j) * bits
            x |= (codes[k + j] & mask) << sh
        out += x.to_bytes(w, "little")
    return bytes(out)


def quant(f, name, shape, bits, gs, axis, word, order, scale_form, scale_dtype, zp, data_dtype=None,
          zeros_dtype=None, shards=None, enc=None, dig=None, signed=False):
    """A zt.quant_group/1 object with random codes; expected values from the profile's formula."""
    r = f.gen.rng
    shards = shards or {}
    data_dtype = data_dtype or word
    n = prod(shape)
    along = shape[axis]
    groups = 1 if gs == 0 else along // gs
    g = along if gs == 0 else gs
    gshape = list(shape)
    gshape[axis] = groups
    ng = prod(gshape)
    if signed:
        q = r.integers(-(1 << (bits - 1)), 1 << (bits - 1), n)
    else:
        q = r.integers(0, 1 << bits, n)
    data = pack_codes([int(c) for c in q], bits, word, order)
    # scales: stored bytes and their float32 value
    if scale_form == "e8m0_exponent":
        sb = r.integers(112, 140, ng).astype(np.uint8)
        sb[0] = 0
        sb[-1] = 150
        sbytes = sb.tobytes()
        s32 = bits_f32([f32bits(math.ldexp(1.0, int(b) - 127)) for b in sb])
    elif scale_dtype == "f64":
        s = r.uniform(0.001, 0.1, ng)
        s[0] = 0.0078125  # exactly representable; the others round when narrowed to f32
        sbytes = s.tobytes()
        s32 = np.array([np.float32(x) for x in s], np.float32)
    elif scale_dtype == "bf16":
        sbits = r.integers(0x3B00, 0x3D80, ng).astype(np.uint16)
        sbytes = sbits.tobytes()
        s32 = (sbits.astype(np.uint32) << 16).view(np.float32)
    elif scale_dtype == "f16":
        s = r.uniform(0.001, 0.05, ng).astype(np.float16)
        sbytes = s.tobytes()
        s32 = s.astype(np.float32)
    else:
        s = r.uniform(0.001, 0.05, ng).astype(np.float32)
        sbytes = s.tobytes()
        s32 = s
    parts = {}
    form = zp["form"]
    if form == "none":
        z32 = np.zeros(ng, np.float32)
    elif form == "implied":
        z32 = np.full(ng, zp["value"], np.float32)
    elif zp["packing"] == "plain":
        if zeros_dtype == "f16":
            z = (r.integers(0, 64, ng) / 4.0).astype(np.float16)
        elif zeros_dtype == "f32":
            z = (r.integers(0, 64, ng) / 4.0).astype(np.float32)
        else:
            z = r.integers(0, 1 << bits, ng).astype(NP[zeros_dtype])
        zbytes = z.tobytes()
        z32 = z.astype(np.float32)
        parts["zeros"] = (zeros_dtype, zbytes)
    else:
        zq = r.integers(0, 1 << bits, ng)
        zbytes = pack_codes([int(c) for c in zq], bits, word, order)
        z32 = zq.astype(np.float32)
        parts["zeros"] = (data_dtype, zbytes)
    sdt, stype = ("u8", "f8_e8m0") if scale_form == "e8m0_exponent" else (scale_dtype, None)
    pd = {"data": f.part(data_dtype, data, shard=shards.get("data"), enc=enc, dig=dig),
          "scales": f.part(sdt, sbytes, type=stype, shard=shards.get("scales"))}
    if "zeros" in parts:
        pd["zeros"] = f.part(parts["zeros"][0], parts["zeros"][1], shard=shards.get("zeros"))
    # group of every element, by index arithmetic
    idx = np.indices(shape)
    idx[axis] //= g
    gi = np.ravel_multi_index(tuple(idx), gshape) if n else np.zeros(shape, np.int64)
    qf = q.reshape(shape).astype(np.float32)
    expected = (qf - z32[gi]) * s32[gi]
    assert expected.dtype == np.float32
    attrs = {"bits": bits, "group_size": gs, "axis": axis,
             "packing": {"word": word, "order": order, "per_word": 8 * WIDTH[word] // bits},
             "scale_form": scale_form, "zero_point": zp}
    return f.obj(name, shape, "zt.quant_group/1", pd, attrs=attrs, npy=expected)


def case_quant(g):
    specs = [
        ("qg-awq-u32-lsb-g32-axis0.zt", "AWQ-like: u32 words, lsb_first, 4 bits, f16 scales, packed zeros "
         "(same_as_data), group 32 along axis 0 of [64,24]",
         dict(shape=[64, 24], bits=4, gs=32, axis=0, word="u32", order="lsb_first", scale_form="f16_factors",
              scale_dtype="f16", zp={"form": "tensor", "packing": "same_as_data"}, dig="xxh3")),
        ("qg-gptq-i32-msb-g32-axis0.zt", "GPTQ-like: i32 data with u32 word, msb_first, 4 bits, f16 scales, packed "
         "zeros, group 32 along axis 0 of [64,24]",
         dict(shape=[64, 24], bits=4, gs=32, axis=0, word="u32", order="msb_first", scale_form="f16_factors",
              scale_dtype="f16", zp={"form": "tensor", "packing": "same_as_data"}, data_dtype="i32")),
        ("qg-mlx-plain-zeros-axis1.zt", "MLX-like: u32 lsb_first 4 bits, f16 scales, plain f16 zeros, group 64 "
         "along axis 1 of [4,128]",
         dict(shape=[4, 128], bits=4, gs=64, axis=1, word="u32", order="lsb_first", scale_form="f16_factors",
              scale_dtype="f16", zp={"form": "tensor", "packing": "plain"}, zeros_dtype="f16")),
        ("qg-bias8-implied.zt", "bias-8 int4: u32 lsb_first, f32 scales, implied zero 8, group 32 along "
         "axis 0 of [64,8]",
         dict(shape=[64, 8], bits=4, gs=32, axis=0, word="u32", order="lsb_first", scale_form="f32_factors",
              scale_dtype="f32", zp={"form": "implied", "value": 8})),
        ("qg-int8-symmetric-per-channel.zt", "symmetric int8: i8 data (two's complement), u8 word, group_size 0 "
         "(one group spanning axis 0, scales [1,12]), no zero point, [8,12]",
         dict(shape=[8, 12], bits=8, gs=0, axis=0, word="u8", order="lsb_first", scale_form="f32_factors",
              scale_dtype="f32", zp={"form": "none"}, data_dtype="i8", signed=True)),
        ("qg-int8-per-row-axis1.zt", "symmetric int8 along axis 1 with group_size 0 (one scale per row, scales [6,1])",
         dict(shape=[6, 40], bits=8, gs=0, axis=1, word="u8", order="lsb_first", scale_form="f32_factors",
              scale_dtype="f16", zp={"form": "none"}, data_dtype="i8", signed=True)),
        ("qg-2bit-u8-msb.zt", "2-bit codes, u8 words (4 per word), msb_first, plain u8 zeros, f16 scales, group 16 "
         "along axis 1 of [16,32]",
         dict(shape=[16, 32], bits=2, gs=16, axis=1, word="u8", order="msb_first", scale_form="f16_factors",
              scale_dtype="f16", zp={"form": "tensor", "packing": "plain"}, zeros_dtype="u8")),
        ("qg-8bit-u16.zt", "8-bit codes in u16 words (2 per word), lsb_first, implied zero 128, f32 scales, group 16 "
         "along axis 1 of [6,32]",
         dict(shape=[6, 32], bits=8, gs=16, axis=1, word="u16", order="lsb_first", scale_form="f32_factors",
              scale_dtype="f32", zp={"form": "implied", "value": 128})),
        ("qg-8bit-u64-msb.zt", "8-bit codes in u64 words (8 per word), msb_first, packed zeros, bf16 scales "
         "(f16_factors), group 32 along axis 1 of [4,64]",
         dict(shape=[4, 64], bits=8, gs=32, axis=1, word="u64", order="msb_first", scale_form="f16_factors",
              scale_dtype="bf16", zp={"form": "tensor", "packing": "same_as_data"})),
        ("qg-e8m0-scales.zt", "scale_form e8m0_exponent (scales u8 of type f8_e8m0, one is 0 = 2^-127), 4 bits u32, "
         "implied zero 8, group 32 along axis 1 of [8,64]",
         dict(shape=[8, 64], bits=4, gs=32, axis=1, word="u32", order="lsb_first", scale_form="e8m0_exponent",
              scale_dtype=None, zp={"form": "implied", "value": 8})),
        ("qg-f32-factors-f64-scales.zt", "f32_factors with f64 scale storage (narrowed to f32, round to nearest even), "
         "4 bits in u8 words, no zero point, group 16 along axis 0 of [32,8]",
         dict(shape=[32, 8], bits=4, gs=16, axis=0, word="u8", order="lsb_first", scale_form="f32_factors",
              scale_dtype="f64", zp={"form": "none"})),
        ("qg-f32-factors-bf16-scales.zt", "f32_factors with bf16 scale storage, 4 bits in u16 words, plain f32 zeros, "
         "group 8 along axis 1 of [16,16]",
         dict(shape=[16, 16], bits=4, gs=8, axis=1, word="u16", order="lsb_first", scale_form="f32_factors",
              scale_dtype="bf16", zp={"form": "tensor", "packing": "plain"}, zeros_dtype="f32")),
        ("qg-3d-axis1.zt", "grouped axis 1 of a 3-D [3,64,8] tensor (not the last), group 16, 4 bits u32 lsb_first, "
         "packed zeros [3,4,8], f16 scales [3,4,8]; data seekable",
         dict(shape=[3, 64, 8], bits=4, gs=16, axis=1, word="u32", order="lsb_first", scale_form="f16_factors",
              scale_dtype="f16", zp={"form": "tensor", "packing": "same_as_data"}, enc=dict(frame=256))),
    ]
    for fname, desc, kw in specs:
        f = g.new(fname, "zt.quant_group/1 " + desc)
        quant(f, "w", **kw)
        f.write()


def mx(f, name, shape, eltype, axis=None, nan_block=1, extra_codes=()):
    r = f.gen.rng
    n = prod(shape)
    blocks = n // 32
    e = r.integers(110, 140, blocks).astype(np.uint8)
    e[0] = 127
    if nan_block is not None:
        e[nan_block] = 0xFF
    if blocks > 3:
        e[2] = 0
        e[3] = 254
    if eltype == "i8":
        q = r.integers(-128, 128, n).astype(np.int8)
        data = q.tobytes()
        el = [float(x) / 64.0 for x in q]
        elbits = [f32bits(x) for x in el]
        dt, ty = "i8", None
    else:
        if eltype == "f4_e2m1":
            codes = r.integers(0, 16, n)
            tab = F4
        else:
            codes = r.integers(0, 256, n)
            tab = f8_table(eltype)
            # keep to NaN codes whose float32 result every reading agrees on (positive, quiet)
            codes = np.where(np.isin(codes, [0xFF, 0xFD, 0xFE, 0x7D, 0x7F]), 0x38, codes)
        for i, c in extra_codes:
            codes[i] = c
        codes = [int(c) for c in codes]
        data = pack_nibbles(codes) if eltype == "f4_e2m1" else bytes(codes)
        elbits = [tab[c] for c in codes]
        el = [struct.unpack("<f", struct.pack("<I", b))[0] for b in elbits]
        dt, ty = "u8", eltype
    out = []
    for i in range(n):
        b = int(e[i // 32])
        if b == 0xFF:
            out.append(QNAN)
        elif math.isnan(el[i]):
            out.append(elbits[i])  # the element's NaN
        else:
            exact = el[i] * math.ldexp(1.0, b - 127)  # exact in binary64
            with np.errstate(over="ignore"):
                out.append(int(np.array([exact], np.float64).astype(np.float32).view(np.uint32)[0]))
    attrs = {"block_size": 32, "scale_form": "e8m0_exponent"}
    if axis is not None:
        attrs["axis"] = axis
    f.obj(name, shape, "zt.mx/1",
          {"data": f.part(dt, data, type=ty, dig="xxh3"), "scales": f.part("u8", e.tobytes(), type="f8_e8m0")},
          attrs=attrs, npy=bits_f32(out).reshape(shape))


def case_mx(g):
    f = g.new("mx-f4_e2m1.zt", "zt.mx/1 MXFP4 [4,64], block 32: block 1 scale 0xFF (NaN), block 2 scale 0, "
              "block 3 scale 254")
    mx(f, "w", [4, 64], "f4_e2m1")
    f.write()
    f = g.new("mx-f8_e4m3fn.zt", "zt.mx/1 MXFP8 E4M3 [2,96]: NaN block, an element NaN (0x7F), 448 x 2^127 "
              "overflows to inf")
    mx(f, "w", [2, 96], "f8_e4m3fn", extra_codes=[(5, 0x7F), (3 * 32 + 1, 0x7E)])
    f.write()
    f = g.new("mx-f8_e5m2.zt", "zt.mx/1 MXFP8 E5M2 [3,64]: NaN block, inf and -inf elements, element NaN 0x7E, "
              "subnormals")
    mx(f, "w", [3, 64], "f8_e5m2", extra_codes=[(0, 0x7C), (1, 0xFC), (2, 0x7E), (4, 0x01), (5, 0x83)])
    f.write()
    f = g.new("mx-i8-axis-explicit.zt", "zt.mx/1 MXINT8 (i8 data, q/64) [3,2,64] with explicit axis 2 (the last)")
    mx(f, "w", [3, 2, 64], "i8", axis=2)
    f.write()


def case_gguf(g):
    f = g.new("gguf-q8_0.zt", "gguf.q8_0/1 [4,64]: 8 blocks of (f16 scale, 32 int8), dequantized as ggml "
              "does (each value d * q in float32)")
    r = g.rng
    blocks = b""
    values = []
    for _ in range(8):
        d = np.float16(r.uniform(0.001, 0.02))
        q = r.integers(-128, 128, 32).astype(np.int8)
        blocks += d.tobytes() + q.tobytes()
        values.append(np.float32(d) * q.astype(np.float32))
    assert len(blocks) == 8 * 34
    f.obj("w", [4, 64], "gguf.q8_0/1", {"data": f.part("u8", blocks, dig="xxh3")},
          attrs={"elems_per_block": 32, "block_bytes": 34}, npy=np.concatenate(values).reshape(4, 64))
    f.write()


def ok_tensor(f):
    a = np.array([1, 2], np.float32)
    f.dense("ok", [2], "f32", a.tobytes(), a)


def case_data_errors(g):
    r = g.rng

    def bad(fname, desc):
        f = g.new(fname, desc + "; the file opens, that tensor.npy reads fail with EIO; tensor 'ok' is fine")
        ok_tensor(f)
        return f

    f = bad("dataerr-bool-byte-2.zt", "bool [6] holding a byte 2")
    f.obj("b", [6], "dense", {"data": f.part("u8", b"\x00\x01\x02\x01\x00\x01", type="bool")},
          npy_error="LayoutData")
    f.write()
    f = bad("dataerr-f4-odd-high-nibble.zt", "f4_e2m1 [5] whose unused high nibble of the last byte is 3")
    f.obj("w", [5], "dense", {"data": f.part("u8", b"\x21\x43\x35", type="f4_e2m1")}, npy_error="LayoutData")
    f.write()

    def csr_raw(f, name, shape, ind, ptr):
        f.obj(name, shape, "zt.sparse_csr/1", {
            "values": f.part("f32", np.ones(len(ind), np.float32).tobytes()),
            "indices": f.part("u32", np.array(ind, np.uint32).tobytes()),
            "indptr": f.part("u32", np.array(ptr, np.uint32).tobytes())}, npy_error="LayoutData")

    f = bad("dataerr-csr-row-order.zt", "CSR [3,4] whose row 1 has column indices 3 then 1")
    csr_raw(f, "m", [3, 4], [0, 3, 1, 2], [0, 1, 3, 4])
    f.write()
    f = bad("dataerr-csr-col-range.zt", "CSR [2,7] with column index 7")
    csr_raw(f, "m", [2, 7], [1, 7, 0], [0, 2, 3])
    f.write()

    def coo_raw(f, name, shape, coords):
        nnz = len(coords) // len(shape)
        f.obj(name, shape, "zt.sparse_coo/1", {
            "values": f.part("f32", np.arange(nnz, dtype=np.float32).tobytes()),
            "coords": f.part("u32", np.array(coords, np.uint32).tobytes())}, npy_error="LayoutData")

    f = bad("dataerr-coo-duplicate.zt", "COO [4,4] naming cell (2,1) twice")
    coo_raw(f, "m", [4, 4], [2, 0, 2, 3, 1, 1, 1, 0])
    f.write()
    f = bad("dataerr-coo-out-of-range.zt", "COO [4,4] with coordinate 4 in dimension 1")
    coo_raw(f, "m", [4, 4], [0, 1, 2, 0, 4, 3])
    f.write()

    def zbad(fname, desc, table=False, **enc):
        f = bad(fname, desc)
        data = bytes(r.integers(0, 256, 16384, dtype=np.uint8))
        p = f.part("u8", data, enc=dict(frame=K4, **enc))
        p.e["sha256"] = None
        p.e["read_error"] = "Encoding"
        f.obj("z", [16384], "dense", {"data": p}, npy_error="Encoding")
        # A reader that reads the seek table when it opens the file finds a
        # table that breaks the profile then, and may refuse the file;
        # one that reads it on first use fails that part's reads instead.
        f.write(reject=dict(reject("Encoding", desc), eio_alternative=["z"]) if table else None)

    # frame 2: magic 4, descriptor 1, window 1, block header 3, then the raw block
    zbad("dataerr-zstd-frame-checksum.zt", "seekable u8 [16384] in 4 frames; one byte in frame 2's raw block is "
         "flipped, so it decodes but its content checksum does not match", corrupt=(2, 2000))
    zbad("dataerr-zstd-seek-table-size.zt", "seekable u8 [16384]: the seek table says the frames decode to "
         "4096+4096+4096+5000 bytes, decoded_length is 16384", table=True, table_sizes=[4096, 4096, 4096, 5000])
    zbad("dataerr-zstd-frame-no-checksum.zt", "seekable u8 [16384] whose frame 1 has no content checksum",
         frame_checksum=lambda i: i != 1)
    zbad("dataerr-zstd-unequal-frames.zt", "seekable u8 [16384] whose non-final frames decode to 4096, 2048, "
         "4096 bytes (must be equal)", table=True, sizes=[4096, 2048, 4096, 6144])


def reject(rule, why):
    return {"rule": rule, "why": why}


def case_rejects(g):
    r = g.rng
    a = np.arange(6, dtype=np.float32)

    def simple(fname):
        f = g.new(fname, "", align=K4)
        return f

    f = simple("reject-qg-bits3-u32.zt")
    # 3-bit codes in u32 words: 32 is not a multiple of 3; written as 10 codes per word
    codes = r.integers(0, 8, 320)
    words = [sum(int(codes[k * 10 + j]) << (3 * j) for j in range(10)) for k in range(32)]
    f.obj("w", [40, 8], "zt.quant_group/1", {
        "data": f.part("u32", np.array(words, np.uint32).tobytes()),
        "scales": f.part("f32", np.ones(8, np.float32).tobytes())},
        attrs={"bits": 3, "group_size": 0, "axis": 0,
               "packing": {"word": "u32", "order": "lsb_first", "per_word": 10},
               "scale_form": "f32_factors", "zero_point": {"form": "none"}}, no_npy="rejected")
    f.desc = "zt.quant_group/1 with bits 3 in u32 words (3 does not divide 32; per_word 10)"
    f.write(reject=reject("LayoutRule", "bits must divide 8 x width(word): 3 does not divide 32"))

    f = simple("reject-qg-zeros-without-tensor-form.zt")
    f.desc = "zt.quant_group/1 with a zeros part although zero_point.form is none"
    f.obj("w", [8, 8], "zt.quant_group/1", {
        "data": f.part("u32", bytes(32)), "scales": f.part("f32", bytes(32)), "zeros": f.part("u32", bytes(4))},
        attrs={"bits": 4, "group_size": 8, "axis": 0,
               "packing": {"word": "u32", "order": "lsb_first", "per_word": 8},
               "scale_form": "f32_factors", "zero_point": {"form": "none"}}, no_npy="rejected")
    f.write(reject=reject("LayoutRule", "zeros part present while zero_point.form is none"))

    f = simple("reject-qg-group-not-dividing.zt")
    f.desc = "zt.quant_group/1 [64,8] with group_size 48 along axis 0 (48 does not divide 64)"
    f.obj("w", [64, 8], "zt.quant_group/1", {
        "data": f.part("u32", bytes(256)), "scales": f.part("f32", bytes(4 * 8))},
        attrs={"bits": 4, "group_size": 48, "axis": 0,
               "packing": {"word": "u32", "order": "lsb_first", "per_word": 8},
               "scale_form": "f32_factors", "zero_point": {"form": "none"}}, no_npy="rejected")
    f.write(reject=reject("LayoutRule", "group_size 48 does not divide shape[0] = 64"))

    f = simple("reject-mx-scales-size.zt")
    f.desc = "zt.mx/1 f4_e2m1 [2,64] (4 blocks) whose scales part has 5 bytes"
    f.obj("w", [2, 64], "zt.mx/1", {
        "data": f.part("u8", bytes(64), type="f4_e2m1"), "scales": f.part("u8", bytes([127] * 5), type="f8_e8m0")},
        attrs={"block_size": 32, "scale_form": "e8m0_exponent"}, no_npy="rejected")
    f.write(reject=reject("LayoutRule", "scales hold 5 bytes, 4 blocks need 4"))

    f = simple("reject-mx-scales-no-type.zt")
    f.desc = "zt.mx/1 f8_e4m3fn [1,32] whose scales part is u8 without logical type f8_e8m0"
    f.obj("w", [1, 32], "zt.mx/1", {
        "data": f.part("u8", bytes(32), type="f8_e4m3fn"), "scales": f.part("u8", bytes([127]))},
        attrs={"block_size": 32, "scale_form": "e8m0_exponent"}, no_npy="rejected")
    f.write(reject=reject("LayoutRule", "scales must be u8 with type f8_e8m0"))

    f = simple("reject-coo-rank0.zt")
    f.desc = "zt.sparse_coo/1 with shape [] (rank 0)"
    f.obj("s", [], "zt.sparse_coo/1", {"values": f.part("f32", b""), "coords": f.part("u32", b"")},
          no_npy="rejected")
    f.write(reject=reject("LayoutRule", "zt.sparse_coo/1 needs rank >= 1"))

    f = simple("reject-zstd-decoded-length-vs-dense.zt")
    f.desc = "dense f32 [3] (12 bytes) whose seekable part has decoded_length 16 (and decodes to 16 bytes)"
    f.dense("t", [3], "f32", np.arange(4, dtype=np.float32).tobytes(), None, enc=dict(), no_npy="rejected")
    f.write(reject=reject("DenseSize", "decoded_length 16, dense size 12"))

    f = simple("reject-decoded-length-without-encoding.zt")
    f.desc = "raw part carrying decoded_length but no encoding"
    f.obj("t", [6], "dense", {"data": f.part("f32", a.tobytes(), extra={"decoded_length": 24})}, no_npy="rejected")
    f.write(reject=reject("Schema", "decoded_length is present iff encoding is present"))

    f = simple("reject-blob-same-offset-different-length.zt")
    f.desc = "two parts at the same offset with lengths 24 and 8: neither identical nor disjoint"
    p = f.part("f32", a.tobytes())
    f.obj("a", [6], "dense", {"data": p}, no_npy="rejected")
    f.obj("b", [2], "dense", {"data": f.part("f32", a[:2].tobytes(), ref=[p.ref[0], 8])}, no_npy="rejected")
    f.write(reject=reject("BlobOverlap", "[4096,24) and [4096,8) overlap without being identical"))

    f = simple("reject-blob-overlaps-manifest.zt")
    f.desc = "a u8 [4106] part at 4096 runs 10 bytes into the manifest blob at 8192"
    f.obj("t", [4106], "dense", {"data": f.part("u8", bytes(4106), ref=[4096, 4106])}, no_npy="rejected")
    f.heap.put(bytes(100))  # 100 bytes of data at 4096, so the manifest lands at 8192
    f.write(reject=reject("BlobOverlap", "part [4096,8202) partially overlaps the manifest blob at 8192"))
    assert f.heap.manifest_blob[0] == 8192

    # non-deterministic CBOR written on purpose
    for fname, attrs, old, new, why in [
        ("reject-cbor-float-not-shortest.zt", {"f": 1.5}, b"\x61f\xf9\x3e\x00", b"\x61f\xfa\x3f\xc0\x00\x00",
         "attribute 1.5 encoded as single precision (fa3fc00000); f93e00 is required"),
        ("reject-cbor-nan-payload.zt", {"n": math.nan}, b"\x61n\xf9\x7e\x00", b"\x61n\xf9\x7e\x01",
         "attribute NaN encoded as f97e01; only f97e00 is canonical"),
        ("reject-cbor-float-64-for-32.zt", {"f": 100000.0}, b"\x61f\xfa\x47\xc3\x50\x00",
         b"\x61f\xfb\x40\xf8\x6a\x00\x00\x00\x00\x00", "attribute 100000.0 encoded as double; single is required"),
    ]:
        f = simple(fname)
        f.desc = "manifest not in deterministic encoding: " + why
        f.attributes = attrs
        f.dense("t", [6], "f32", a.tobytes(), a)
        mb = cbor(f.manifest())
        assert mb.count(old) == 1
        f.write(raw=mb.replace(old, new), reject=reject("CborDeterminism", why))

    # shards
    def sharded_reject(fname, desc, rule, why, size_delta=0, mutate=None, missing=False, ref=None):
        f = g.new(fname, desc, align=K4)
        s = f.data_shard("00001")
        if ref is None:
            f.obj("t", [6], "dense", {"data": f.part("f32", a.tobytes(), shard=s)}, no_npy="rejected")
        else:  # the reference is longer than what the shard holds
            f.obj("t", [ref[1] // 4], "dense", {"data": f.part("f32", bytes(ref[1]), shard=s, ref=ref)},
                  no_npy="rejected")
            f.shard_heaps[s].put(a.tobytes())
        f.write_shards({s: "sha256"}, size_delta={s: size_delta})
        path = os.path.join(g.out, f.shard_files[s])
        if mutate:
            with open(path, "r+b") as fh:
                mutate(fh)
        if missing:
            os.remove(path)
            del g.data_shards[f.shard_files[s]]
            g.written.pop(f.shard_files[s])
        alt = {"eio_alternative": ["t"]} if rule in ("ShardIdentity", "ShardMissing") else {}
        f.write(reject=dict(reject(rule, why), **alt))

    sharded_reject("reject-shard-size.zt", "shard 00001's size in the table is one more than the file's",
                   "ShardIdentity", "reject-shard-size-00001.zt is 4160 bytes, the table says 4161",
                   size_delta=1)

    def flip_data(fh):
        fh.seek(4096)
        fh.write(b"\x7f")
    sharded_reject("reject-shard-digest.zt", "shard 00001's bytes differ from its sha256 digest (same size)",
                   "ShardIdentity", "whole-file sha256 of reject-shard-digest-00001.zt does not match the table",
                   mutate=flip_data)
    sharded_reject("reject-shard-missing.zt", "shard 00001 (reject-shard-missing-00001.zt) does not exist",
                   "ShardMissing", "no file reject-shard-missing-00001.zt next to the root", missing=True)
    sharded_reject("reject-shard-blob-bounds.zt",
                   "part refers to [4096, 4096+64) in shard 00001, whose size 4160 (table and file agree) leaves "
                   "a data region of 4120 bytes",
                   "BlobBounds", "offset + length = 4160 > size - 40 = 4120 of shard 00001 (checked from the root "
                   "manifest alone)", ref=[4096, 64])


# --------------------------------------------------------------------------- verification

def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def verify(g, exp):
    out = g.out
    # every valid root: structure, canonical manifest, parts and arrays
    shard_regions = {}
    for fname, e in exp["files"].items():
        path = os.path.join(out, fname)
        f = g.files[fname]
        if e["expect"] == "reject":
            try:
                m = ztread.Model(path)
                for name, (o, shape, n, pp) in m.objects.items():
                    for q in pp.values():
                        m.stored(q)
                        if e.get("eio_alternative") and q.encoding == ztread.SEEKABLE:
                            m.decoded(q, verify=False)  # a seek table that breaks the profile
            except ztread.ZtError as ex:
                if ex.rule != e["rule"]:
                    raise AssertionError(f"{fname}: refused with {ex}, expected {e['rule']}")
                continue
            raise AssertionError(f"{fname}: not refused (expected {e['rule']})")
        m = ztread.structure_check(path, allow_regions=f.allow)
        if cbor2.dumps(cbor2.loads(m.manifest_bytes), canonical=True) != m.manifest_bytes:
            raise AssertionError(f"{fname}: manifest does not re-encode to the same bytes")
        assert to_json(m.manifest.get("attributes", {})) == e["attributes"], fname
        assert set(m.objects) == set(e["tensors"]), fname
        for name, t in e["tensors"].items():
            o, shape, n, pp = m.objects[name]
            assert shape == t["shape"] and o["layout"] == t["layout"], (fname, name)
            assert set(pp) == set(t["parts"]), (fname, name)
            for pn, pe in t["parts"].items():
                q = pp[pn]
                if q.shard is not None:
                    shard_regions.setdefault(f.shard_files[q.shard], []).append((q.offset, q.length))
                if pe["encoding"] not in ("raw", ztread.SEEKABLE):  # unknown: the stored bytes
                    b = m.stored(q)
                    assert len(b) == pe["size"] and sha256(b) == pe["sha256"], (fname, name, pn)
                    continue
                try:
                    b = m.decoded(q)
                except ztread.ZtError as ex:
                    if pe["read_error"] != ex.rule:
                        raise AssertionError(f"{fname}: {name}/{pn}: {ex}")
                    continue
                assert pe["read_error"] is None, (fname, name, pn, "decoded although an error is expected")
                assert len(b) == pe["size"] and sha256(b) == pe["sha256"], (fname, name, pn)
            try:
                arr = m.tensor(name)
            except ztread.ZtError as ex:
                if ex.rule == "Unsupported":
                    assert t["npy"] is None and t["npy_error"] is None and t.get("no_npy"), (fname, name, str(ex))
                else:
                    assert t["npy_error"] == ex.rule, (fname, name, str(ex))
                continue
            assert t["npy_error"] is None, (fname, name, "decoded although npy_error is set")
            want = np.load(os.path.join(out, t["npy"]))
            if not same_bits(arr, want):
                raise AssertionError(f"{fname}: {name}: reader and generator disagree:\n{arr!r}\n{want!r}")
    # data shards: footer of a data shard, zero padding around the referenced blobs
    for fn, root in exp["data_shards"].items():
        m = ztread.Model(os.path.join(out, fn))
        assert m.manifest is None
        if exp["files"][root]["expect"] == "valid":
            check_padding(os.path.join(out, fn), shard_regions.get(fn, []))
    # the corrupted frame fails on its checksum, not on anything else
    m = ztread.Model(os.path.join(out, "dataerr-zstd-frame-checksum.zt"))
    try:
        m.decoded(m.objects["z"][3]["data"])
        raise AssertionError("dataerr-zstd-frame-checksum.zt decodes")
    except ztread.ZtError as ex:
        assert "checksum" in str(ex), str(ex)
    # every name is NFC
    for fname, e in exp["files"].items():
        for name in e.get("tensors", {}):
            assert unicodedata.is_normalized("NFC", name)


def check_padding(path, regions):
    with open(path, "rb") as fh:
        data = fh.read()
    used = sorted([(0, 8), (len(data) - 40, 40)] + list(regions))
    pos = 0
    for a, ln in used:
        if a > pos and any(data[pos:a]):
            raise AssertionError(f"{path}: nonzero padding in [{pos},{a})")
        pos = max(pos, a + ln)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen.py OUTDIR")
    if not __debug__:
        sys.exit("gen.py: run without -O (the self-check uses assert)")
    out = sys.argv[1]
    if os.path.exists(out):
        for name in os.listdir(out):
            p = os.path.join(out, name)
            if name == "expected":
                shutil.rmtree(p)
            elif name.endswith(".zt") or name == "expected.json":
                os.remove(p)
    os.makedirs(out, exist_ok=True)
    selftest_tables()
    g = Gen(out)
    for case in [case_dense_storage, case_logical, case_zstd, case_alias, case_names, case_attributes,
                 case_unknown, case_sharded, case_appended, case_manifest_first, case_sparse, case_quant, case_mx,
                 case_gguf, case_data_errors, case_rejects]:
        case(g)
    exp = g.expected()
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as fh:
        json.dump(exp, fh, indent=1, sort_keys=True, ensure_ascii=False)
        fh.write("\n")
    verify(g, exp)
    total = sum(g.written.values())
    print(f"{len(g.written)} .zt files ({len(exp['files'])} mountable, {len(exp['data_shards'])} data shards), "
          f"{total} bytes, in {out}")


if __name__ == "__main__":
    main()
