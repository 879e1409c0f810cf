#!/usr/bin/env python3
"""Copies what the block-kernel tests need from the shared GGUF fixtures.

Usage: gen_listing.py FIXTURES_DIR   (the folder holding expected.json)

It copies quant_block32.gguf, quant_k.gguf and quant_misc.gguf, the expected
.npy of every tensor of a type this package's block kernels cover, and writes
listing.json: one record per tensor (file, name, type id, abs_offset, nbytes,
npy path relative to this folder).
"""
import json
import os
import shutil
import sys

FILES = ["quant_block32.gguf", "quant_k.gguf", "quant_misc.gguf"]
# Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K TQ1_0 TQ2_0 MXFP4 NVFP4 Q1_0 Q2_0
TYPES = {2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 34, 35, 39, 40, 41, 42}


def main():
    src = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(src, "expected.json")) as f:
        expected = json.load(f)
    listing = []
    for rec in expected["files"]:
        if rec["file"] not in FILES:
            continue
        shutil.copyfile(os.path.join(src, rec["file"]), os.path.join(here, rec["file"]))
        for t in rec["tensors"]:
            if t["ggml_type_id"] not in TYPES:
                continue
            dst = os.path.join(here, t["npy"])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(src, t["npy"]), dst)
            listing.append({
                "file": rec["file"],
                "name": t["name"],
                "ggml_type": t["ggml_type"],
                "ggml_type_id": t["ggml_type_id"],
                "ne": t["ne"],
                "abs_offset": t["abs_offset"],
                "nbytes": t["nbytes"],
                "npy": t["npy"],
            })
    with open(os.path.join(here, "listing.json"), "w") as f:
        json.dump({"source": "shared GGUF fixtures, expected.json (values from gguf-py, cross-checked with ggml's C)",
                   "tensors": listing}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
