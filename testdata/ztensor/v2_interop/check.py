#!/usr/bin/python3
"""Compare a ztfs mount of one generated zTensor v2 file with expected.json.

    /usr/bin/python3 check.py OUTDIR MOUNTPOINT FILE   # FILE as named in expected.json, e.g. csr-zstd.zt
    /usr/bin/python3 check.py OUTDIR --list            # FILE, expect, rule: one line per mountable file

MOUNTPOINT is where OUTDIR/FILE is mounted (or an empty folder when the mount was refused).
Prints one line per mismatch, "FILE: TENSOR: what differs", and exits 1 if there is any.
"""

import errno
import hashlib
import json
import os
import sys

import numpy as np

# layout words of the mount contract (docs/formats/ztensor-v2.md, "Layouts"); other ids are shown as they are
LAYOUT_WORD = {"zt.sparse_csr/1": "sparse_csr", "zt.sparse_coo/1": "sparse_coo",
               "zt.quant_group/1": "quantized_group"}


class Checker:
    def __init__(self, outdir, mnt, fname):
        self.outdir, self.mnt, self.fname = outdir, mnt, fname
        self.problems = []

    def bad(self, tensor, what):
        self.problems.append(f"{self.fname}: {tensor if tensor is not None else '-'}: {what}")

    # ---- reading files of the mount
    def read(self, path):
        """(size, sha256) of the whole file, or raises OSError."""
        h = hashlib.sha256()
        n = 0
        with open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                h.update(b)
                n += len(b)
        return n, h.hexdigest()

    def expect_eio(self, tensor, path, what):
        try:
            self.read(path)
        except OSError as ex:
            if ex.errno != errno.EIO:
                self.bad(tensor, f"{what}: reading failed with {errno.errorcode.get(ex.errno, ex.errno)}, "
                                 f"expected EIO")
            return
        self.bad(tensor, f"{what}: read succeeded, expected EIO")

    # ---- the checks
    def run(self, e):
        mpath = os.path.join(self.mnt, "manifest.json")
        mounted = os.path.isfile(mpath)
        if e["expect"] == "reject":
            if not mounted:
                return
            alt = e.get("eio_alternative")
            if not alt:
                self.bad(None, f"mounted, but the file must be refused ({e['rule']}: {e['why']})")
                return
            man = self.load_manifest(mpath)
            if man is None:
                return
            for name in alt:  # a reader that checks the shard lazily: reads of these fail instead
                t = man.get("tensors", {}).get(name)
                if t is None:
                    self.bad(name, f"mounted although {e['rule']} ({e['why']}); tensor missing from manifest.json")
                    continue
                for pn, c in (t.get("components") or {}).items():
                    self.expect_eio(name, os.path.join(self.mnt, c["path"]), f"part {pn} ({e['rule']})")
                if t.get("npy"):
                    self.expect_eio(name, os.path.join(self.mnt, t["npy"]["path"]), f"tensor.npy ({e['rule']})")
            return
        if not mounted:
            self.bad(None, "not mounted (no manifest.json), but the file is valid")
            return
        man = self.load_manifest(mpath)
        if man is None:
            return
        if man.get("format") != "ztensor":
            self.bad(None, f"format {man.get('format')!r}, expected 'ztensor'")
        if man.get("format_version") != "2":
            self.bad(None, f"format_version {man.get('format_version')!r}, expected '2'")
        self.compare_json(None, "root attributes", man.get("attributes", {}), e["attributes"])
        got = man.get("tensors", {})
        for name in sorted(set(got) - set(e["tensors"])):
            self.bad(name, "unexpected tensor in manifest.json")
        for name, t in e["tensors"].items():
            if name not in got:
                self.bad(name, "tensor missing from manifest.json")
                continue
            self.tensor(name, t, got[name])

    def load_manifest(self, mpath):
        try:
            with open(mpath, "rb") as f:
                return json.loads(f.read().decode("utf-8"))
        except (OSError, ValueError) as ex:
            self.bad(None, f"manifest.json unreadable: {ex}")
            return None

    def tensor(self, name, t, m):
        tdir = os.path.join(self.mnt, m.get("path", ""))
        if not m.get("path") or not os.path.isdir(tdir):
            self.bad(name, f"tensor directory {m.get('path')!r} missing")
        if m.get("shape") != t["shape"]:
            self.bad(name, f"shape {m.get('shape')} != {t['shape']}")
        want_layout = LAYOUT_WORD.get(t["layout"], t["layout"])
        if m.get("layout") != want_layout:
            self.bad(name, f"layout {m.get('layout')!r} != {want_layout!r}")
        self.compare_json(name, "attributes", m.get("attributes", {}), t["attributes"])
        comps = m.get("components") or {}
        for pn in sorted(set(comps) - set(t["parts"])):
            self.bad(name, f"unexpected part {pn}")
        for pn, pe in t["parts"].items():
            c = comps.get(pn)
            if c is None:
                self.bad(name, f"part {pn} missing from manifest.json")
                continue
            self.part(name, pn, pe, c)
        npy = m.get("npy")
        if t["npy"] is None and t["npy_error"] is None:
            if npy is not None:
                self.bad(name, f"has tensor.npy {npy!r}; expected none ({t.get('no_npy')})")
            elif not m.get("npy_missing"):
                self.bad(name, "npy is null but npy_missing says nothing")
            if os.path.lexists(os.path.join(tdir, "tensor.npy")):
                self.bad(name, "tensor.npy exists although manifest.json says npy null")
            return
        if not npy or not npy.get("path"):
            self.bad(name, "no tensor.npy in manifest.json")
            return
        path = os.path.join(self.mnt, npy["path"])
        if t["npy_error"] is not None:
            self.expect_eio(name, path, f"tensor.npy ({t['npy_error']})")
            return
        self.npy(name, path, npy, os.path.join(self.outdir, t["npy"]))

    def part(self, name, pn, pe, c):
        path = os.path.join(self.mnt, c.get("path", ""))
        try:
            st = os.stat(path)
        except OSError as ex:
            self.bad(name, f"part {pn}: {c.get('path')!r}: {ex}")
            return
        if st.st_size != pe["size"]:
            self.bad(name, f"part {pn}: stat size {st.st_size} != {pe['size']}")
        if c.get("size") != pe["size"]:
            self.bad(name, f"part {pn}: manifest.json size {c.get('size')} != {pe['size']}")
        stored = c.get("stored") or {}
        enc = stored.get("encoding")
        if pe["encoding"] == "raw":
            if enc not in (None, "raw"):
                self.bad(name, f"part {pn}: stored.encoding {enc!r}, expected raw")
        elif enc != pe["encoding"]:
            self.bad(name, f"part {pn}: stored.encoding {enc!r} != {pe['encoding']!r}")
        if pe.get("digest") and stored.get("digest") != pe["digest"]:
            self.bad(name, f"part {pn}: stored.digest {stored.get('digest')!r} != {pe['digest']!r}")
        if pe.get("read_error"):
            self.expect_eio(name, path, f"part {pn} ({pe['read_error']})")
            return
        try:
            n, h = self.read(path)
        except OSError as ex:
            self.bad(name, f"part {pn}: read failed: {ex}")
            return
        if n != pe["size"]:
            self.bad(name, f"part {pn}: read {n} bytes, expected {pe['size']}")
        elif h != pe["sha256"]:
            self.bad(name, f"part {pn}: sha256 {h} != {pe['sha256']}")

    def npy(self, name, path, mnpy, wantpath):
        want = np.load(wantpath)
        try:
            with open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                start = f.tell()
            size = os.stat(path).st_size
        except (OSError, ValueError) as ex:
            self.bad(name, f"tensor.npy header: {ex}")
            return
        if fortran:
            self.bad(name, "tensor.npy is in Fortran order")
        if start % 64:
            self.bad(name, f"tensor.npy data starts at {start}, not a multiple of 64")
        if size != start + want.nbytes:
            self.bad(name, f"tensor.npy is {size} bytes, expected {start} + {want.nbytes}")
        if mnpy.get("dtype") is not None and np.dtype(mnpy["dtype"]) != want.dtype:
            self.bad(name, f"manifest.json npy dtype {mnpy['dtype']!r} != {want.dtype.str!r}")
        if mnpy.get("shape") is not None and list(mnpy["shape"]) != list(want.shape):
            self.bad(name, f"manifest.json npy shape {mnpy['shape']} != {list(want.shape)}")
        try:
            try:
                got = np.load(path, mmap_mode="r")
            except ValueError:  # numpy cannot map an empty array on some versions
                got = np.load(path)
            got_bytes = np.asarray(got).tobytes()
        except (OSError, ValueError) as ex:
            self.bad(name, f"tensor.npy: numpy.load failed: {ex}")
            return
        if got.dtype != want.dtype:
            self.bad(name, f"tensor.npy dtype {got.dtype.str} != {want.dtype.str}")
            return
        if got.shape != want.shape:
            self.bad(name, f"tensor.npy shape {list(got.shape)} != {list(want.shape)}")
            return
        if got_bytes != want.tobytes():
            self.bad(name, "tensor.npy values differ: " + first_difference(np.asarray(got), want))

    def compare_json(self, tensor, what, got, want):
        for d in json_diff(got, want, what):
            self.bad(tensor, d)


def first_difference(got, want):
    it = want.dtype.itemsize
    gb, wb = got.tobytes(), want.tobytes()
    count = sum(1 for i in range(0, len(wb), it) if gb[i:i + it] != wb[i:i + it])
    for i in range(0, len(wb), it):
        if gb[i:i + it] != wb[i:i + it]:
            k = i // it
            idx = np.unravel_index(k, want.shape) if want.ndim else ()
            return (f"{count} of {want.size} elements; first at {list(map(int, idx))}: got "
                    f"{got.reshape(-1)[k]!r} (bits {gb[i:i + it][::-1].hex()}), expected "
                    f"{want.reshape(-1)[k]!r} (bits {wb[i:i + it][::-1].hex()})")
    return "?"


def json_diff(got, want, where):
    """Differences between two JSON values. Numbers compare by value (an integral float may be
    shown as an integer), but booleans are not numbers and integers compare exactly."""
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if num(want):
        return [] if num(got) and got == want else [f"{where}: {got!r} != {want!r}"]
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: {got!r} is not a map"]
        out = []
        for k in sorted(set(got) | set(want)):
            if k not in got:
                out.append(f"{where}.{k}: missing")
            elif k not in want:
                out.append(f"{where}.{k}: unexpected")
            else:
                out += json_diff(got[k], want[k], f"{where}.{k}")
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: {got!r} != {want!r}"]
        out = []
        for i, (a, b) in enumerate(zip(got, want)):
            out += json_diff(a, b, f"{where}[{i}]")
        return out
    if type(got) is not type(want) or got != want:
        return [f"{where}: {got!r} != {want!r}"]
    return []


def main(argv):
    if len(argv) == 3 and argv[2] == "--list":
        with open(os.path.join(argv[1], "expected.json"), encoding="utf-8") as f:
            exp = json.load(f)
        for fname, e in sorted(exp["files"].items()):
            print(f"{fname}\t{e['expect']}\t{e.get('rule', '')}")
        return 0
    if len(argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    outdir, mnt, fname = argv[1:]
    with open(os.path.join(outdir, "expected.json"), encoding="utf-8") as f:
        exp = json.load(f)
    if fname not in exp["files"]:
        print(f"{fname}: -: not in expected.json", file=sys.stderr)
        return 2
    c = Checker(outdir, mnt, fname)
    c.run(exp["files"][fname])
    for p in c.problems:
        print(p)
    return 1 if c.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
