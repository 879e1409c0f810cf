#!/usr/bin/python3
"""A small, independent zTensor v2 reader, written from the specification texts.

gen.py uses it to re-read every file it writes: a file meant to be valid must pass
every check here and decode to the expected arrays, a file meant to be refused must be
refused with the intended rule, and a file with a data-rule violation must open and then
fail to decode with the intended rule. It is deliberately separate from the writer code
in gen.py: the writer builds bytes from values, this module rebuilds values from bytes.

Rule names follow ../v2_conformance/expected.tsv, plus ShardIdentity, ShardMissing,
Encoding and Unsupported (see README.md).
"""

import hashlib
import math
import os
import re
import struct

import numpy as np
import xxhash
import zstandard

MAGIC = b"\x89ZT2\r\n\x1a\n"
FOOTER = 40
ALIGN = 4096
MANIFEST_CAP = 1 << 30
MAX_DEPTH = 32
SEEKABLE = "zt.zstd-seekable/1"
ZSTD_MAGIC = 0xFD2FB528
SKIPPABLE_SEEK = 0x184D2A5E
SEEK_FOOTER_MAGIC = 0x8F92EAB1
MAX_FRAME = 16 << 20


class ZtError(Exception):
    def __init__(self, rule, msg):
        super().__init__(f"{rule}: {msg}")
        self.rule = rule


# --------------------------------------------------------------------------- types

STORAGE = {  # dtype -> (numpy dtype of the storage element, width)
    "f64": ("<f8", 8), "f32": ("<f4", 4), "f16": ("<f2", 2), "bf16": ("<u2", 2),
    "i64": ("<i8", 8), "i32": ("<i4", 4), "i16": ("<i2", 2), "i8": ("|i1", 1),
    "u64": ("<u8", 8), "u32": ("<u4", 4), "u16": ("<u2", 2), "u8": ("|u1", 1),
}

LOGICAL = {  # type -> (required dtype, size function)
    "bool": ("u8", lambda n: n),
    "f8_e4m3fn": ("u8", lambda n: n),
    "f8_e5m2": ("u8", lambda n: n),
    "f8_e4m3fnuz": ("u8", lambda n: n),
    "f8_e5m2fnuz": ("u8", lambda n: n),
    "f8_e8m0": ("u8", lambda n: n),
    "f4_e2m1": ("u8", lambda n: (n + 1) // 2),
    "complex64": ("f32", lambda n: 8 * n),
    "complex128": ("f64", lambda n: 16 * n),
}

# numpy dtype of the tensor.npy for a logical type (storage dtype when no type)
NPY = {
    "f64": "<f8", "f32": "<f4", "f16": "<f2", "bf16": "<f4",
    "i64": "<i8", "i32": "<i4", "i16": "<i2", "i8": "|i1",
    "u64": "<u8", "u32": "<u4", "u16": "<u2", "u8": "|u1",
    "bool": "|b1", "f8_e4m3fn": "<f4", "f8_e5m2": "<f4", "f8_e4m3fnuz": "<f4",
    "f8_e5m2fnuz": "<f4", "f8_e8m0": "<f4", "f4_e2m1": "<f4",
    "complex64": "<c8", "complex128": "<c16",
}

QNAN32 = 0x7FC00000


def size_of(dtype, ltype, n):
    """Decoded byte size of n logical elements; None when the type is unknown."""
    if ltype is None:
        return n * STORAGE[dtype][1]
    if ltype not in LOGICAL:
        return None
    return LOGICAL[ltype][1](n)


def _minifloat(codes, ebits, mbits, bias, kind):
    """Vectorised decode of 8-bit (or narrower) float codes to float32 bit patterns.

    kind: 'ieee' (max exponent = inf/NaN), 'fn' (only all-ones is NaN), 'fnuz'
    (0x80 is NaN, no inf, no negative zero), 'none' (no specials)."""
    c = codes.astype(np.uint32)
    sign = (c >> (ebits + mbits)) & 1
    e = (c >> mbits) & ((1 << ebits) - 1)
    m = c & ((1 << mbits) - 1)
    # value = m * 2^(1-bias-mbits) when e == 0, else (2^mbits + m) * 2^(e-bias-mbits)
    mag = np.where(e == 0, m.astype(np.float64), (m + (1 << mbits)).astype(np.float64))
    exp = np.where(e == 0, 1 - bias - mbits, e.astype(np.int64) - bias - mbits)
    val = np.ldexp(mag, exp.astype(np.int32))
    val = np.where(sign == 1, -val, val)
    out = val.astype(np.float32).view(np.uint32).copy()
    emax = (1 << ebits) - 1
    mmax = (1 << mbits) - 1
    signbits = (sign << 31).astype(np.uint32)
    if kind == "ieee":
        inf = (e == emax) & (m == 0)
        nan = (e == emax) & (m != 0)
        out = np.where(inf, signbits | 0x7F800000, out)
        out = np.where(nan, signbits | QNAN32, out)
    elif kind == "fn":
        nan = (e == emax) & (m == mmax)
        out = np.where(nan, signbits | QNAN32, out)
    elif kind == "fnuz":
        nan = c == 0x80
        out = np.where(nan, np.uint32(QNAN32), out)
    return out.astype(np.uint32).view(np.float32)


def decode_f8(ltype, codes):
    if ltype == "f8_e4m3fn":
        return _minifloat(codes, 4, 3, 7, "fn")
    if ltype == "f8_e5m2":
        return _minifloat(codes, 5, 2, 15, "ieee")
    if ltype == "f8_e4m3fnuz":
        return _minifloat(codes, 4, 3, 8, "fnuz")
    if ltype == "f8_e5m2fnuz":
        return _minifloat(codes, 5, 2, 16, "fnuz")
    if ltype == "f8_e8m0":
        return e8m0_to_f32(codes)
    raise ValueError(ltype)


def e8m0_to_f32(codes):
    c = codes.astype(np.int64)
    with np.errstate(over="ignore"):  # code 0xFF (2^128) is replaced by NaN below
        v = np.ldexp(np.ones(c.shape, np.float64), (c - 127).astype(np.int32)).astype(np.float32)
    bits = v.view(np.uint32).copy()
    bits[c == 0xFF] = QNAN32
    return bits.view(np.float32)


def decode_f4(codes):
    return _minifloat(codes, 2, 1, 1, "none")


def unpack_nibbles(raw, n):
    b = np.frombuffer(raw, np.uint8)
    out = np.empty(2 * len(b), np.uint8)
    out[0::2] = b & 0xF
    out[1::2] = b >> 4
    return out[:n]


def logical_array(dtype, ltype, raw, n, what):
    """Bytes of n logical elements -> numpy array in the tensor.npy dtype (flat)."""
    if ltype is None:
        a = np.frombuffer(raw, STORAGE[dtype][0])
        if dtype == "bf16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        return a.copy()
    if ltype == "bool":
        a = np.frombuffer(raw, np.uint8)
        if np.any(a > 1):
            raise ZtError("LayoutData", f"{what}: bool byte {int(a[a > 1][0])} (only 0 and 1)")
        return a.astype(np.bool_)
    if ltype.startswith("f8_"):
        return decode_f8(ltype, np.frombuffer(raw, np.uint8))
    if ltype == "f4_e2m1":
        if n % 2 and len(raw) and raw[-1] >> 4:
            raise ZtError("LayoutData", f"{what}: f4_e2m1 unused high nibble is not zero")
        return decode_f4(unpack_nibbles(raw, n))
    if ltype == "complex64":
        return np.frombuffer(raw, "<c8").copy()
    if ltype == "complex128":
        return np.frombuffer(raw, "<c16").copy()
    raise ZtError("Unsupported", f"{what}: logical type {ltype}")


# --------------------------------------------------------------------------- CBOR

class CborReader:
    """Decoder that accepts only RFC 8949 core deterministic encoding."""

    def __init__(self, buf):
        self.b = buf
        self.p = 0

    def fail(self, rule, msg):
        raise ZtError(rule, f"{msg} at byte {self.p}")

    def need(self, n):
        if self.p + n > len(self.b):
            self.fail("CborSyntax", "truncated item")

    def arg(self, ai):
        if ai < 24:
            return ai
        if ai > 27:
            self.fail("CborSyntax", "reserved or indefinite additional information")
        n = 1 << (ai - 24)
        self.need(n)
        v = int.from_bytes(self.b[self.p:self.p + n], "big")
        self.p += n
        lo = {1: 24, 2: 256, 4: 65536, 8: 1 << 32}[n]
        if v < lo:
            self.fail("CborDeterminism", "integer or length not in shortest form")
        return v

    def item(self, depth):
        if depth > MAX_DEPTH:
            self.fail("CborDepth", f"nesting deeper than {MAX_DEPTH}")
        self.need(1)
        ib = self.b[self.p]
        self.p += 1
        major, ai = ib >> 5, ib & 31
        if ai == 31:
            self.fail("CborSyntax", "indefinite length")
        if major == 7:
            return self.simple(ai)
        v = self.arg(ai)
        if major == 0:
            return v
        if major == 1:
            return -1 - v
        if major in (2, 3):
            self.need(v)
            s = bytes(self.b[self.p:self.p + v])
            self.p += v
            if major == 2:
                return s
            try:
                return s.decode("utf-8")
            except UnicodeDecodeError:
                self.fail("CborSyntax", "text string is not UTF-8")
        if major == 4:
            return [self.item(depth + 1) for _ in range(v)]
        if major == 5:
            out = {}
            prev = None
            for _ in range(v):
                start = self.p
                k = self.item(depth + 1)
                kb = bytes(self.b[start:self.p])
                if prev is not None:
                    if kb == prev:
                        self.fail("CborDuplicateKey", f"duplicate map key {k!r}")
                    if kb < prev:
                        self.fail("CborDeterminism", f"map key {k!r} out of order")
                prev = kb
                if isinstance(k, (list, dict)):
                    k = ("unhashable", kb)
                out[k] = self.item(depth + 1)
            return out
        self.fail("CborSyntax", "tagged item")

    def simple(self, ai):
        if ai == 20:
            return False
        if ai == 21:
            return True
        if ai == 22:
            return None
        if ai == 23:
            self.fail("Schema", "undefined is not a permitted value")
        if ai == 25:
            self.need(2)
            raw = bytes(self.b[self.p:self.p + 2])
            self.p += 2
            v = struct.unpack(">e", raw)[0]
            if math.isnan(v) and raw != b"\x7e\x00":
                self.fail("CborDeterminism", "NaN not encoded as f97e00")
            return v
        if ai == 26:
            self.need(4)
            v = struct.unpack(">f", self.b[self.p:self.p + 4])[0]
            self.p += 4
            if math.isnan(v) or fits_half(v):
                self.fail("CborDeterminism", "float wider than needed")
            return v
        if ai == 27:
            self.need(8)
            v = struct.unpack(">d", self.b[self.p:self.p + 8])[0]
            self.p += 8
            if math.isnan(v) or fits_half(v) or fits_single(v):
                self.fail("CborDeterminism", "float wider than needed")
            return v
        self.fail("CborSyntax", f"simple value {ai}")


def fits_half(v):
    try:
        r = struct.unpack(">e", struct.pack(">e", v))[0]
    except (OverflowError, struct.error):
        return False
    return r == v and math.copysign(1, r) == math.copysign(1, v)


def fits_single(v):
    try:
        r = struct.unpack(">f", struct.pack(">f", v))[0]
    except (OverflowError, struct.error):
        return False
    return r == v and math.copysign(1, r) == math.copysign(1, v)


def cbor_decode(buf):
    r = CborReader(buf)
    v = r.item(1)
    if r.p != len(buf):
        raise ZtError("CborSyntax", "bytes after the manifest item")
    return v


# --------------------------------------------------------------------------- container

def read_footer(data):
    if len(data) < 48:
        raise ZtError("FileTooSmall", f"{len(data)} bytes")
    if data[:8] != MAGIC:
        raise ZtError("HeaderMagic", "leading magic")
    if data[-8:] != MAGIC:
        raise ZtError("FooterMagic", "trailing magic")
    off, length, h, ver, _res = struct.unpack("<QQQII", data[-40:-8])
    if ver != 2:
        raise ZtError("Version", f"footer version {ver}")
    return off, length, h


DIGEST_RE = re.compile(r"^(xxh3:[0-9a-f]{16}|sha256:[0-9a-f]{64})$")
SHARD_RE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$")


def digest_of(algo, data):
    if algo == "xxh3":
        return "xxh3:%016x" % xxhash.xxh3_64_intdigest(data)
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_uint(v):
    return type(v) is int and 0 <= v < (1 << 64)


def check_name(n, what):
    if type(n) is not str:
        raise ZtError("Schema", f"{what}: name is not text")
    if n == "" or len(n.encode("utf-8")) > 1024 or "\x00" in n:
        raise ZtError("Name", f"{what}: bad name {n!r}")


def check_attrs(a, what):
    if type(a) is not dict:
        raise ZtError("Schema", f"{what}: attributes is not a map")
    for k in a:
        check_name(k, f"{what} attribute key")


class Part:
    pass


class Model:
    """An opened (and fully validated at the metadata level) v2 file."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.data = f.read()
        self.size = len(self.data)
        off, length, h = read_footer(self.data)
        if length == 0:
            if off or h:
                raise ZtError("ManifestBounds", "data shard with nonzero manifest offset or hash")
            self.manifest = None
            return
        if length > MANIFEST_CAP:
            raise ZtError("ManifestTooLarge", f"{length}")
        if off > self.size - FOOTER or length > self.size - FOOTER - off:
            raise ZtError("ManifestBounds", "manifest outside the data region")
        if off % ALIGN or off < ALIGN:
            raise ZtError("BlobAlignment", f"manifest offset {off}")
        mbytes = self.data[off:off + length]
        if xxhash.xxh3_64_intdigest(mbytes) != h:
            raise ZtError("ManifestHash", "XXH3-64 mismatch")
        self.manifest_blob = (off, length)
        self.manifest_bytes = mbytes
        self.manifest = cbor_decode(mbytes)
        self.validate()

    # ---- metadata validation (Draft 4's validation summary, section 3.6, and the profiles)
    def validate(self):
        m = self.manifest
        if type(m) is not dict or "objects" not in m:
            raise ZtError("Schema", "root is not a map with objects")
        if type(m["objects"]) is not dict:
            raise ZtError("Schema", "objects is not a map")
        if "attributes" in m:
            check_attrs(m["attributes"], "root")
        self.shards = {}
        if "shards" in m:
            if type(m["shards"]) is not dict:
                raise ZtError("Schema", "shards is not a map")
            for k, v in m["shards"].items():
                if type(k) is not str:
                    raise ZtError("Schema", "shard name is not text")
                if not SHARD_RE.match(k):
                    raise ZtError("ShardName", f"shard name {k!r}")
                if type(v) is not dict or not is_uint(v.get("size")) or type(v.get("digest")) is not str \
                        or not DIGEST_RE.match(v["digest"]):
                    raise ZtError("Schema", f"shard {k}: size/digest")
                self.shards[k] = v
        self.objects = {}
        refs = {}  # file key -> list of (offset, length, what)
        refs[None] = [(self.manifest_blob[0], self.manifest_blob[1], "manifest")]
        for name, o in m["objects"].items():
            check_name(name, "object")
            if type(o) is not dict:
                raise ZtError("Schema", f"{name}: object is not a map")
            shape = o.get("shape")
            if type(shape) is not list or not all(is_uint(d) for d in shape):
                raise ZtError("Schema", f"{name}: shape")
            if len(shape) > 64:
                raise ZtError("Shape", f"{name}: rank {len(shape)}")
            n = 1
            for d in shape:
                n *= d
            if n >= 1 << 64:
                raise ZtError("Shape", f"{name}: element count overflows")
            if type(o.get("layout")) is not str:
                raise ZtError("Schema", f"{name}: layout")
            if "attributes" in o:
                check_attrs(o["attributes"], name)
            parts = o.get("parts")
            if type(parts) is not dict or not parts:
                raise ZtError("Schema", f"{name}: parts missing or empty")
            pp = {}
            for pn, p in parts.items():
                check_name(pn, f"{name} part")
                pp[pn] = self.part(name, pn, p, refs)
            self.objects[name] = (o, shape, n, pp)
        for key, lst in refs.items():
            lst = sorted((a, b, w) for a, b, w in lst if b > 0)
            far = None  # the range reaching furthest so far
            for a, b, w in lst:
                if far is not None and a < far[0] + far[1] and (a, b) != far[:2]:
                    raise ZtError("BlobOverlap", f"{far[2]} and {w} overlap in {key or 'this file'}")
                if far is None or a + b > far[0] + far[1]:
                    far = (a, b, w)
        for name, (o, shape, n, pp) in self.objects.items():
            self.layout_rules(name, o, shape, n, pp)

    def part(self, name, pn, p, refs):
        what = f"{name}/{pn}"
        if type(p) is not dict:
            raise ZtError("Schema", f"{what}: part is not a map")
        q = Part()
        q.dtype = p.get("dtype")
        if q.dtype not in STORAGE:
            raise ZtError("Schema", f"{what}: dtype {q.dtype!r}")
        q.type = p.get("type")
        if q.type is not None:
            if type(q.type) is not str:
                raise ZtError("Schema", f"{what}: type")
            if q.type in LOGICAL and LOGICAL[q.type][0] != q.dtype:
                raise ZtError("Schema", f"{what}: type {q.type} over {q.dtype}")
        blob = p.get("blob")
        if type(blob) is not list or len(blob) != 2 or not all(is_uint(x) for x in blob):
            raise ZtError("Schema", f"{what}: blob")
        q.offset, q.length = blob
        q.shard = p.get("shard")
        if q.shard is not None:
            if type(q.shard) is not str:
                raise ZtError("Schema", f"{what}: shard")
            if q.shard not in self.shards:
                raise ZtError("ShardRef", f"{what}: shard {q.shard!r} not declared")
        q.encoding = p.get("encoding")
        q.decoded_length = p.get("decoded_length")
        if (q.encoding is None) != (q.decoded_length is None):
            raise ZtError("Schema", f"{what}: encoding and decoded_length go together")
        if q.encoding is not None and (type(q.encoding) is not str or not is_uint(q.decoded_length)):
            raise ZtError("Schema", f"{what}: encoding/decoded_length types")
        q.digest = p.get("digest")
        if q.digest is not None and (type(q.digest) is not str or not DIGEST_RE.match(q.digest)):
            raise ZtError("Schema", f"{what}: digest {q.digest!r}")
        if q.offset % ALIGN or q.offset < ALIGN:
            raise ZtError("BlobAlignment", f"{what}: offset {q.offset}")
        limit = (self.size if q.shard is None else self.shards[q.shard]["size"]) - FOOTER
        if q.offset > limit or q.length > limit - q.offset:
            raise ZtError("BlobBounds", f"{what}: blob past the data region")
        refs.setdefault(q.shard, []).append((q.offset, q.length, what))
        q.dsize = q.length if q.encoding is None else q.decoded_length
        q.name = what
        return q

    def layout_rules(self, name, o, shape, n, pp):
        lay = o["layout"]
        at = o.get("attributes", {})

        def rule(cond, msg):
            if not cond:
                raise ZtError("LayoutRule", f"{name}: {msg}")

        if lay == "dense":
            rule(set(pp) == {"data"}, "dense needs exactly one part 'data'")
            d = pp["data"]
            s = size_of(d.dtype, d.type, n)
            if s is not None and s != d.dsize:
                raise ZtError("DenseSize", f"{name}: {d.dsize} bytes, {s} required")
        elif lay == "zt.sparse_csr/1":
            rule(len(shape) == 2, "rank must be 2")
            rule(set(pp) == {"values", "indices", "indptr"}, "parts")
            ind, ptr, val = pp["indices"], pp["indptr"], pp["values"]
            rule(ind.dtype in ("u32", "u64") and ind.type is None, "indices dtype")
            rule(ptr.dtype == ind.dtype and ptr.type is None, "indptr dtype")
            w = STORAGE[ind.dtype][1]
            rule(ind.dsize % w == 0, "indices size")
            nnz = ind.dsize // w
            rule(ptr.dsize == (shape[0] + 1) * w, "indptr size")
            s = size_of(val.dtype, val.type, nnz)
            rule(s is None or s == val.dsize, "values size")
        elif lay == "zt.sparse_coo/1":
            rule(len(shape) >= 1, "rank must be at least 1")
            rule(set(pp) == {"values", "coords"}, "parts")
            c, val = pp["coords"], pp["values"]
            rule(c.dtype in ("u32", "u64") and c.type is None, "coords dtype")
            w = STORAGE[c.dtype][1]
            rule(c.dsize % (w * len(shape)) == 0, "coords size")
            nnz = c.dsize // w // len(shape)
            s = size_of(val.dtype, val.type, nnz)
            rule(s is None or s == val.dsize, "values size")
        elif lay == "zt.quant_group/1":
            self.quant_rules(name, shape, n, pp, at, rule)
        elif lay == "zt.mx/1":
            rule(set(pp) == {"data", "scales"}, "parts")
            d, s = pp["data"], pp["scales"]
            rule(s.dtype == "u8" and s.type == "f8_e8m0", "scales must be u8/f8_e8m0")
            bs = at.get("block_size")
            rule(is_uint(bs) and bs >= 2, "block_size")
            rule(at.get("scale_form") == "e8m0_exponent", "scale_form")
            rule(len(shape) >= 1, "rank")
            axis = at.get("axis", len(shape) - 1)
            rule(is_uint(axis) and axis < len(shape), "axis")
            rule(shape[axis] % bs == 0, "block_size must divide shape[axis]")
            rule((d.dtype, d.type) in (("u8", "f4_e2m1"), ("u8", "f8_e4m3fn"), ("u8", "f8_e5m2"),
                                       ("i8", None)), "element type")
            rule(d.dsize == size_of(d.dtype, d.type, n), "data size")
            rule(s.dsize == n // bs, "scales size")
        elif lay.startswith("gguf.") and lay.endswith("/1"):
            rule(set(pp) == {"data"}, "parts")
            d = pp["data"]
            rule(d.dtype == "u8" and d.type is None, "data dtype")
            epb, bb = at.get("elems_per_block"), at.get("block_bytes")
            rule(is_uint(epb) and epb >= 1 and n % epb == 0, "elems_per_block")
            rule(is_uint(bb) and bb >= 1, "block_bytes")
            rule(d.dsize == n // epb * bb, "size")

    def quant_rules(self, name, shape, n, pp, at, rule):
        bits, gs, axis = at.get("bits"), at.get("group_size"), at.get("axis")
        pk, sf, zp = at.get("packing"), at.get("scale_form"), at.get("zero_point")
        rule(bits in (2, 3, 4, 5, 6, 8) and type(bits) is int, "bits")
        rule(is_uint(gs), "group_size")
        rule(is_uint(axis) and axis < len(shape), "axis")
        rule(type(pk) is dict and type(zp) is dict and type(sf) is str, "packing/zero_point/scale_form")
        word = pk.get("word")
        rule(word in ("u8", "u16", "u32", "u64"), "packing.word")
        rule(pk.get("order") in ("lsb_first", "msb_first"), "packing.order")
        ww = STORAGE[word][1]
        rule((8 * ww) % bits == 0, "bits must divide the word")
        per = 8 * ww // bits
        rule(pk.get("per_word") == per, "per_word")
        form = zp.get("form")
        rule(form in ("none", "implied", "tensor"), "zero_point.form")
        want = {"data", "scales"} | ({"zeros"} if form == "tensor" else set())
        rule(set(pp) == want, "parts")
        d, s = pp["data"], pp["scales"]
        rule(d.type is None and d.dtype in ("u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64")
             and d.dtype.replace("i", "u") == word, "data dtype must match packing.word")
        if sf == "f32_factors":
            rule(s.dtype in ("f64", "f32", "f16", "bf16") and s.type is None, "scales dtype")
        elif sf == "f16_factors":
            rule(s.dtype in ("f16", "bf16") and s.type is None, "scales dtype")
        elif sf == "e8m0_exponent":
            rule(s.dtype == "u8" and s.type == "f8_e8m0", "scales dtype")
        else:
            rule(False, "scale_form")
        if form == "implied":
            rule(type(zp.get("value")) is int, "zero_point.value")
        if form == "tensor":
            rule(zp.get("packing") in ("same_as_data", "plain"), "zero_point.packing")
        along = shape[axis]
        if gs:
            rule(along % gs == 0, "group_size must divide shape[axis]")
        groups = 1 if gs == 0 else along // gs
        lanes = n // along if along else 0
        rule(n % per == 0, "codes fill whole words")
        rule(d.dsize == n // per * ww, "data size")
        rule(s.dsize == groups * lanes * STORAGE[s.dtype][1], "scales size")
        if form == "tensor":
            z = pp["zeros"]
            if zp["packing"] == "plain":
                rule(z.type is None, "zeros type")
                rule(z.dsize == groups * lanes * STORAGE[z.dtype][1], "zeros size")
            else:
                rule(z.dtype == d.dtype and z.type is None, "zeros dtype")
                rule((groups * lanes) % per == 0, "zeros fill whole words")
                rule(z.dsize == groups * lanes // per * ww, "zeros size")

    # ---- data access
    def shard_bytes(self, shard):
        if shard is None:
            return self.data
        if not hasattr(self, "_shard_cache"):
            self._shard_cache = {}
        if shard in self._shard_cache:
            return self._shard_cache[shard]
        stem = self.path[:-3] if self.path.endswith(".zt") else self.path
        p = f"{stem}-{shard}.zt"
        if not os.path.exists(p):
            raise ZtError("ShardMissing", f"shard {shard}: {p} not found")
        with open(p, "rb") as f:
            b = f.read()
        ent = self.shards[shard]
        if len(b) != ent["size"]:
            raise ZtError("ShardIdentity", f"shard {shard}: size {len(b)} != {ent['size']}")
        try:
            read_footer(b)
        except ZtError as e:
            raise ZtError("ShardIdentity", f"shard {shard}: {e}")
        algo = ent["digest"].split(":")[0]
        if digest_of(algo, b) != ent["digest"]:
            raise ZtError("ShardIdentity", f"shard {shard}: digest mismatch")
        self._shard_cache[shard] = b
        return b

    def stored(self, q):
        b = self.shard_bytes(q.shard)
        return b[q.offset:q.offset + q.length]

    def decoded(self, q, verify=True):
        raw = self.stored(q)
        if q.encoding is None:
            out = raw
        elif q.encoding == SEEKABLE:
            out = decode_seekable(raw, q.decoded_length, q.name)
        else:
            raise ZtError("Unsupported", f"{q.name}: encoding {q.encoding}")
        if verify and q.digest:
            algo = q.digest.split(":")[0]
            if digest_of(algo, out) != q.digest:
                raise ZtError("Digest", f"{q.name}: digest mismatch")
        return out

    def tensor(self, name):
        """The tensor.npy array, or ZtError (Unsupported when ztfs has none)."""
        o, shape, n, pp = self.objects[name]
        lay = o["layout"]
        at = o.get("attributes", {})
        if lay == "dense":
            d = pp["data"]
            if d.type is not None and d.type not in LOGICAL:
                raise ZtError("Unsupported", f"{name}: logical type {d.type}")
            return logical_array(d.dtype, d.type, self.decoded(d), n, name).reshape(shape)
        if lay == "zt.sparse_csr/1":
            return self.csr(name, shape, pp)
        if lay == "zt.sparse_coo/1":
            return self.coo(name, shape, pp)
        if lay == "zt.quant_group/1":
            return self.dequant(name, shape, n, pp, at)
        if lay == "zt.mx/1":
            return self.mx(name, shape, n, pp, at)
        if lay == "gguf.q8_0/1":
            # ggml's Q8_0 block: an f16 scale d, then 32 int8 codes; x = d * q.
            raw = np.frombuffer(self.decoded(pp["data"]), dtype=np.uint8).reshape(-1, 34)
            d = raw[:, :2].copy().view("<f2").astype(np.float32)
            q = raw[:, 2:].copy().view(np.int8).astype(np.float32)
            return (d * q).reshape(shape)
        raise ZtError("Unsupported", f"{name}: layout {lay}")

    def values_of(self, q, nnz):
        if q.type is not None and q.type not in LOGICAL:
            raise ZtError("Unsupported", f"{q.name}: logical type {q.type}")
        return logical_array(q.dtype, q.type, self.decoded(q), nnz, q.name)

    def csr(self, name, shape, pp):
        R, C = shape
        ind = np.frombuffer(self.decoded(pp["indices"]), STORAGE[pp["indices"].dtype][0]).astype(np.uint64)
        ptr = np.frombuffer(self.decoded(pp["indptr"]), STORAGE[pp["indptr"].dtype][0]).astype(np.uint64)
        nnz = len(ind)
        vals = self.values_of(pp["values"], nnz)
        bad = lambda m: ZtError("LayoutData", f"{name}: {m}")
        if ptr[0] != 0:
            raise bad("indptr[0] != 0")
        if np.any(ptr[1:] < ptr[:-1]):
            raise bad("indptr decreases")
        if ptr[-1] != nnz:
            raise bad("indptr[R] != nnz")
        if nnz and ind.max() >= C:
            raise bad("column index out of range")
        out = np.zeros(shape, vals.dtype)
        for r in range(R):
            a, b = int(ptr[r]), int(ptr[r + 1])
            cols = ind[a:b]
            if np.any(cols[1:] <= cols[:-1]):
                raise bad(f"row {r} column indices not strictly increasing")
            out[r, cols.astype(np.int64)] = vals[a:b]
        return out

    def coo(self, name, shape, pp):
        c = np.frombuffer(self.decoded(pp["coords"]), STORAGE[pp["coords"].dtype][0]).astype(np.uint64)
        nd = len(shape)
        nnz = len(c) // nd
        vals = self.values_of(pp["values"], nnz)
        coords = c.reshape(nd, nnz)
        for d in range(nd):
            if nnz and coords[d].max() >= shape[d]:
                raise ZtError("LayoutData", f"{name}: coordinate out of range in dimension {d}")
        seen = set(map(tuple, coords.T.tolist()))
        if len(seen) != nnz:
            raise ZtError("LayoutData", f"{name}: duplicate coordinates")
        out = np.zeros(shape, vals.dtype)
        if nnz:
            out[tuple(coords.astype(np.int64))] = vals
        return out

    def codes(self, q, count, bits, order, per):
        raw = self.decoded(q)
        wdt = STORAGE[q.dtype.replace("i", "u")][0]
        words = np.frombuffer(raw, wdt).astype(np.uint64)
        mask = np.uint64((1 << bits) - 1)
        out = np.empty((len(words), per), np.uint64)
        for j in range(per):
            sh = j * bits if order == "lsb_first" else (per - 1 - j) * bits
            out[:, j] = (words >> np.uint64(sh)) & mask
        out = out.reshape(-1)[:count].astype(np.int64)
        width = STORAGE[q.dtype][1]
        if q.dtype.startswith("i") and bits == 8 * width:
            out = np.where(out >= 1 << (bits - 1), out - (1 << bits), out)
        return out

    def dequant(self, name, shape, n, pp, at):
        bits, gs, axis = at["bits"], at["group_size"], at["axis"]
        pk, sf, zp = at["packing"], at["scale_form"], at["zero_point"]
        per = pk["per_word"]
        along = shape[axis]
        g = along if gs == 0 else gs
        groups = 1 if gs == 0 else along // gs
        gshape = list(shape)
        gshape[axis] = groups
        q = self.codes(pp["data"], n, bits, pk["order"], per).reshape(shape).astype(np.float32)
        s = pp["scales"]
        sraw = self.decoded(s)
        if sf == "e8m0_exponent":
            sc = e8m0_to_f32(np.frombuffer(sraw, np.uint8))
        else:
            sc = logical_array(s.dtype, None, sraw, None, s.name).astype(np.float32)
        sc = np.repeat(sc.reshape(gshape), g, axis=axis)
        if zp["form"] == "none":
            z = np.zeros(gshape, np.float32)
        elif zp["form"] == "implied":
            z = np.full(gshape, zp["value"], np.float32)
        elif zp["packing"] == "plain":
            zq = pp["zeros"]
            z = logical_array(zq.dtype, None, self.decoded(zq), None, zq.name).astype(np.float32).reshape(gshape)
        else:
            z = self.codes(pp["zeros"], groups * (n // along), bits, pk["order"], per)
            z = z.astype(np.float32).reshape(gshape)
        z = np.repeat(z, g, axis=axis)
        return ((q - z) * sc).astype(np.float32)

    def mx(self, name, shape, n, pp, at):
        bs = at["block_size"]
        d, s = pp["data"], pp["scales"]
        raw = self.decoded(d)
        if d.type is None:
            el = np.frombuffer(raw, np.int8).astype(np.float64) / 64.0
        elif d.type == "f4_e2m1":
            el = decode_f4(unpack_nibbles(raw, n)).astype(np.float64)
        else:
            el = decode_f8(d.type, np.frombuffer(raw, np.uint8)).astype(np.float64)
        e = np.frombuffer(self.decoded(s), np.uint8).astype(np.int64)
        eb = np.repeat(e, bs)
        with np.errstate(over="ignore", invalid="ignore"):
            v = (el * np.ldexp(1.0, (eb - 127).astype(np.int32))).astype(np.float32)
        bits = v.view(np.uint32).copy()
        bits[eb == 0xFF] = QNAN32
        return bits.view(np.float32).reshape(shape)


def decode_seekable(enc, decoded_length, what="part"):
    bad = lambda m: ZtError("Encoding", f"{what}: {m}")
    if len(enc) < 17:
        raise bad("too short for a seek table")
    nframes, desc, magic = struct.unpack("<IBI", enc[-9:])
    if magic != SEEK_FOOTER_MAGIC:
        raise bad("seek table magic")
    if desc & 0x7C:
        raise bad("seek table reserved bits")
    esz = 12 if desc & 0x80 else 8
    tlen = 8 + nframes * esz + 9
    if tlen > len(enc):
        raise bad("seek table longer than the part")
    st = len(enc) - tlen
    sm, fsz = struct.unpack_from("<II", enc, st)
    if sm != SKIPPABLE_SEEK or fsz != tlen - 8:
        raise bad("seek table skippable frame header")
    entries = []
    for i in range(nframes):
        e = struct.unpack_from("<III" if esz == 12 else "<II", enc, st + 8 + i * esz)
        entries.append(e)
    if sum(e[1] for e in entries) != decoded_length:
        raise bad("seek table decoded sizes do not add up to decoded_length")
    if sum(e[0] for e in entries) != st:
        raise bad("seek table compressed sizes do not cover the frames")
    for e in entries[:-1]:
        if e[1] != entries[0][1]:
            raise bad("non-final frames of unequal decoded size")
    out = bytearray()
    pos = 0
    for i, e in enumerate(entries):
        frame = enc[pos:pos + e[0]]
        pos += e[0]
        if e[1] > MAX_FRAME:
            raise bad(f"frame {i} larger than 16 MiB")
        if len(frame) < 6 or struct.unpack_from("<I", frame)[0] != ZSTD_MAGIC:
            raise bad(f"frame {i}: not a zstd frame")
        if not (frame[4] >> 2) & 1:
            raise bad(f"frame {i}: no content checksum")
        dobj = zstandard.ZstdDecompressor().decompressobj()
        try:
            got = dobj.decompress(frame)
        except zstandard.ZstdError as ex:
            raise bad(f"frame {i}: {ex}")
        if not dobj.eof or dobj.unused_data:
            raise bad(f"frame {i}: not exactly one frame")
        if len(got) != e[1]:
            raise bad(f"frame {i}: decoded {len(got)} bytes, seek table says {e[1]}")
        if esz == 12 and (xxhash.xxh64_intdigest(got) & 0xFFFFFFFF) != e[2]:
            raise bad(f"frame {i}: seek table checksum")
        out += got
    if len(out) != decoded_length:
        raise bad("decoded length")
    return bytes(out)


def structure_check(path, data=None, allow_regions=()):
    """Layout facts the reader does not require but a writer must get right:
    padding is zero, blobs are inside the file. allow_regions: (offset, length) byte ranges
    that are known non-padding besides the referenced blobs (an appended file's old
    manifest and footer)."""
    m = Model(path)
    data = m.data
    used = [(0, 8), (len(data) - FOOTER, FOOTER)] + list(allow_regions)
    if m.manifest is not None:
        used.append(m.manifest_blob)
        for name, (o, shape, n, pp) in m.objects.items():
            for q in pp.values():
                if q.shard is None:
                    used.append((q.offset, q.length))
    used.sort()
    pos = 0
    for a, ln in used:
        if a > pos and any(data[pos:a]):
            raise AssertionError(f"{path}: nonzero padding in [{pos},{a})")
        pos = max(pos, a + ln)
    return m
