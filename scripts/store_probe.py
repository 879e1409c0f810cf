"""What a decode-once store could give a whole-model load, at best.

A decode-once store writes each tensor's bytes, as a mount serves them, to
a file of its own in a cache directory, and then lets the kernel serve that
file with FUSE passthrough. This script does the same without FUSE, for
every tensor of a safetensors folder: it copies each tensor's bytes into its
own file under STORE (the copy a store makes on first read), then loads
every tensor as scripts/loaders.py does (each file memory-mapped and
summed), and prints the seconds of each step and of the same load from the
source folder, as JSON. The server's own work and the FUSE round trips are
left out, so a real store can only be slower.

  store_probe.py MODEL STORE    STORE: an empty directory (tmpfs or disk)
"""

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loaders  # noqa: E402


def copy_out(tensors, store):
    """Writes each tensor's bytes to its own file in store."""
    paths, fds = [], {}
    for i, (_, path, off, length, _) in enumerate(tensors):
        fd = fds.get(path)
        if fd is None:
            fd = fds[path] = os.open(path, os.O_RDONLY)
        out = os.path.join(store, "%05d" % i)
        o = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        done = 0
        while done < length:
            done += os.pwrite(o, os.pread(fd, min(loaders.CHUNK, length - done), off + done), done)
        os.close(o)
        paths.append(out)
    for fd in fds.values():
        os.close(fd)
    return paths


def main():
    model, store = sys.argv[1], sys.argv[2]
    tensors = loaders.safetensors_tensors(model)
    for job in tensors:  # a first pass maps the files and warms the page cache
        loaders.do_source(job)
    loaders._maps.clear()
    t = time.monotonic()
    for job in tensors:
        loaders.do_source(job)
    source = time.monotonic() - t
    os.sync()
    t = time.monotonic()
    paths = copy_out(tensors, store)
    copied = time.monotonic() - t
    t = time.monotonic()
    for p in paths:
        loaders.word_sum(np.memmap(p, dtype=np.uint8, mode="r"))
    loaded = time.monotonic() - t
    print(json.dumps({"source_seconds": source, "copy_seconds": copied, "store_load_seconds": loaded,
                      "ratio": source / (copied + loaded)}))


if __name__ == "__main__":
    main()
