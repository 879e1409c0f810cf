"""Model loaders, as the benchmark and the parallel-loader tests run them.

Every mode touches every tensor of a model and prints one JSON object:
the seconds it took, the bytes it read, the longest single read (a stall),
and per tensor a checksum that does not depend on how the bytes were read,
so that a pass over a mount can be compared with a pass over the source.

  loaders.py source DIR [NPROC]   the safetensors files of a model folder
                                  (as a loader does: each file memory-mapped
                                  once, each tensor's bytes summed as 16-bit
                                  words)
  loaders.py data MNT [NPROC]     the same through a mount's tensors/*/data,
                                  each its own file and memory map
  loaders.py npy MNT [NPROC]      every tensors/*/tensor.npy, numpy.load
                                  with mmap_mode="r", summed as float64
  loaders.py pread MNT [NPROC]    every tensors/*/data read with 1 MiB
                                  preads (vLLM's prefetch, Run:ai's
                                  streamer), hashed with SHA-256
  loaders.py reference DIR        the checksums of all three mount modes,
                                  computed from the source folder
  loaders.py hammer MNT SECONDS EXPECTED
                                  one process of a many-loader run: until
                                  SECONDS have passed, memory-maps every file
                                  EXPECTED (JSON: path in MNT -> SHA-256) names,
                                  in an order of its own, its pages dropped
                                  first, reads it through the map in 1 MiB
                                  slices, and checks its digest; prints the
                                  passes, bytes, longest slice and mismatches

With NPROC > 1 the tensors are shared out among NPROC processes, each
reading different tensors at the same time.
"""

import hashlib
import json
import os
import struct
import sys
import time
from multiprocessing import Pool

import numpy as np

CHUNK = 1 << 20


def bf16_to_f32(words):
    return (words.astype(np.uint32) << 16).view(np.float32)


def word_sum(a):
    """The sum of a tensor's bytes as little-endian 16-bit words (bytes when odd)."""
    a = np.asarray(a).view(np.uint8)
    if a.size % 2 == 0:
        return int(a.view("<u2").sum(dtype=np.uint64))
    return int(a.sum(dtype=np.uint64))


def timed_chunks(a, fn):
    """Applies fn to a in slices of CHUNK bytes; returns the results and the
    longest slice's time (a page fault through FUSE is a read)."""
    flat = a.reshape(-1)
    step = max(1, CHUNK // max(1, flat.itemsize))
    out, worst = [], 0.0
    for i in range(0, flat.size, step):
        t = time.monotonic()
        out.append(fn(flat[i:i + step]))
        worst = max(worst, time.monotonic() - t)
    return out, worst


def safetensors_tensors(d):
    """(name, path, offset, length, dtype) of every tensor of the folder."""
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
        else sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    out = []
    for f in files:
        p = os.path.join(d, f)
        with open(p, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            h = json.loads(fh.read(n))
        for k, v in h.items():
            if k != "__metadata__":
                b, e = v["data_offsets"]
                out.append((k, p, 8 + n + b, e - b, v["dtype"]))
    return out


def mount_tensors(mnt):
    """The tensor names of a mount, from its manifest."""
    return sorted(json.load(open(os.path.join(mnt, "manifest.json")))["tensors"])


def tensor_dir(mnt, name):
    return os.path.join(mnt, "tensors", *name.split("/"))


# One memory map per safetensors file and process, as safetensors' safe_open
# and transformers keep one.
_maps = {}


def do_source(job):
    name, path, off, length, _ = job
    mm = _maps.get(path)
    if mm is None:
        mm = _maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
    sums, worst = timed_chunks(mm[off:off + length], word_sum)
    return name, sum(sums), length, worst


def do_data(job):
    mnt, name = job
    mm = np.memmap(os.path.join(tensor_dir(mnt, name), "data"), dtype=np.uint8, mode="r")
    sums, worst = timed_chunks(mm, word_sum)
    return name, sum(sums), mm.size, worst


def do_npy(job):
    mnt, name = job
    a = np.load(os.path.join(tensor_dir(mnt, name), "tensor.npy"), mmap_mode="r")
    sums, worst = timed_chunks(a, lambda s: float(s.sum(dtype=np.float64)))
    return name, repr(round(sum(sums), 3)), a.nbytes, worst


def do_pread(job):
    mnt, name = job
    h, n, worst = hashlib.sha256(), 0, 0.0
    fd = os.open(os.path.join(tensor_dir(mnt, name), "data"), os.O_RDONLY)
    try:
        while True:
            t = time.monotonic()
            b = os.pread(fd, CHUNK, n)
            worst = max(worst, time.monotonic() - t)
            if not b:
                break
            h.update(b)
            n += len(b)
    finally:
        os.close(fd)
    return name, h.hexdigest(), n, worst


# The tensor.npy type of each safetensors dtype that keeps its own (BF16
# widens to float32).
NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                "I16": "<i2", "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2",
                "U8": "u1", "BOOL": "?"}


def reference(d):
    """What data, npy and pread give for each tensor of the source folder."""
    out = {"data": {}, "npy": {}, "pread": {}}
    for name, path, off, length, dtype in safetensors_tensors(d):
        with open(path, "rb") as fh:
            fh.seek(off)
            raw = fh.read(length)
        out["data"][name] = word_sum(np.frombuffer(raw, dtype=np.uint8))
        out["pread"][name] = hashlib.sha256(raw).hexdigest()
        if dtype == "BF16":
            vals = bf16_to_f32(np.frombuffer(raw, dtype="<u2"))
        else:
            vals = np.frombuffer(raw, dtype=NUMPY_DTYPES[dtype])
        sums, _ = timed_chunks(vals, lambda s: float(s.sum(dtype=np.float64)))
        out["npy"][name] = repr(round(sum(sums), 3))
    return out


def hammer(mnt, seconds, expected_path):
    import mmap
    import random
    want = json.load(open(expected_path))
    names = sorted(want)
    rng = random.Random(os.getpid())
    end = time.monotonic() + seconds
    passes, files, nbytes, worst, worst_at, errors = 0, 0, 0, 0.0, "", []
    slices, slow = 0, [0, 0]  # slices read; over 100 ms, over 1 s
    while time.monotonic() < end and len(errors) < 10:
        rng.shuffle(names)
        for name in names:
            if time.monotonic() >= end:
                break
            fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                # The kernel's pages of the file go, so that ztfs serves
                # the faults rather than the page cache.
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                h = hashlib.sha256()
                if size:
                    with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mm:
                        for off in range(0, size, CHUNK):
                            t = time.monotonic()
                            h.update(mm[off:off + CHUNK])
                            d = time.monotonic() - t
                            slices += 1
                            if d > 0.1:
                                slow[0] += 1
                            if d > 1:
                                slow[1] += 1
                            if d > worst:
                                worst, worst_at = d, "%s at %d" % (name, off)
            except OSError as e:
                errors.append("%s: %s" % (name, e))
                continue
            finally:
                os.close(fd)
            if h.hexdigest() != want[name]:
                errors.append("%s: SHA-256 %s, want %s" % (name, h.hexdigest(), want[name]))
            files += 1
            nbytes += size
        else:
            passes += 1
    print(json.dumps({"passes": passes, "files": files, "bytes": nbytes, "slices": slices,
                      "over_100ms": slow[0], "over_1s": slow[1],
                      "worst_read_seconds": worst, "worst_read": worst_at, "errors": errors}))


def main():
    mode, where = sys.argv[1], sys.argv[2]
    if mode == "hammer":
        hammer(where, float(sys.argv[3]), sys.argv[4])
        return
    nproc = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    if mode == "reference":
        print(json.dumps(reference(where)))
        return
    if mode == "source":
        jobs, fn = safetensors_tensors(where), do_source
    else:
        jobs = [(where, n) for n in mount_tensors(where)]
        fn = {"data": do_data, "npy": do_npy, "pread": do_pread}[mode]
    t = time.monotonic()
    if nproc > 1:
        with Pool(nproc) as pool:
            # Different tensors per process: each takes every nproc-th.
            results = [r for part in pool.map(lambda_free_chunk, [(fn, jobs[i::nproc]) for i in range(nproc)])
                       for r in part]
    else:
        results = [fn(j) for j in jobs]
    seconds = time.monotonic() - t
    print(json.dumps({
        "seconds": seconds,
        "bytes": sum(r[2] for r in results),
        "worst_read_seconds": max((r[3] for r in results), default=0.0),
        "processes": nproc,
        "tensors": {r[0]: r[1] for r in results},
    }))


def lambda_free_chunk(arg):
    fn, jobs = arg
    return [fn(j) for j in jobs]


if __name__ == "__main__":
    main()
