#!/usr/bin/python3
"""Read zTensor v2 files another program wrote with ztread.py, this folder's independent reader.

Usage: readback.py CASES.json

CASES.json is a list of {"file": "<a .zt file>", "expected": {"<tensor name>": "<.npy file>"}}:
for each file, the arrays its tensors must hold (the tensor.npy of what it was written from),
paths relative to CASES.json's folder; null for a tensor that has no array (its parts are
checked only). ztfs's test of `ztfs convert` writes it
(cmd/ztfs/convert_test.go); nothing here knows ztfs's code, only ztread.py's reading of the
specification texts.

Each file must pass ztread's structure check (magic, footer, manifest hash, strict deterministic
CBOR, names, alignment, bounds, identical-or-disjoint references, zero padding) and re-encode its
manifest with cbor2 in canonical mode to the same bytes; its objects must be exactly the expected
names; every part must decode and match its digest; and every tensor ztread decodes must equal
its expected array bit for bit (dtype, shape and bytes, so NaN payloads count). A tensor in a
layout ztread does not decode (it reads `gguf.q8_0/1` of the gguf.* profiles) is counted as not
decoded, not as a failure.

Prints one line per mismatch, then "files F, tensors N, equal E, parts only P, not decoded U
(layouts ...)";
exits 1 on any mismatch.
"""

import json
import os
import sys

import cbor2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ztread  # noqa: E402


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check(path, expected, base, stats):
    """Returns the mismatches of one file, as lines."""
    try:
        m = ztread.structure_check(path)
    except (ztread.ZtError, AssertionError) as ex:
        return [f"{path}: {ex}"]
    bad = []
    if cbor2.dumps(cbor2.loads(m.manifest_bytes), canonical=True) != m.manifest_bytes:
        bad.append(f"{path}: the manifest does not re-encode to the same bytes in canonical CBOR")
    if set(m.objects) != set(expected):
        bad.append(f"{path}: objects {sorted(m.objects)}, expected {sorted(expected)}")
    for name in sorted(set(m.objects) & set(expected)):
        stats["tensors"] += 1
        _, _, _, parts = m.objects[name]
        try:
            for q in parts.values():
                m.decoded(q)  # decodes, and checks the digest
            if expected[name] is None:
                stats["partsonly"] += 1
                continue
            got = m.tensor(name)
        except ztread.ZtError as ex:
            if ex.rule == "Unsupported":
                stats["undecoded"] += 1
                stats["layouts"].add(m.objects[name][0]["layout"])
                continue
            bad.append(f"{path}: {name}: {ex}")
            continue
        want = np.load(os.path.join(base, expected[name]), allow_pickle=False)
        if same_bits(got, want):
            stats["equal"] += 1
        else:
            bad.append(f"{path}: {name}: ztread reads {got.dtype} {list(got.shape)}, "
                       f"the source holds {want.dtype} {list(want.shape)}"
                       + ("" if got.shape != want.shape or got.dtype != want.dtype else " with other bytes"))
    return bad


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    base = os.path.dirname(os.path.abspath(sys.argv[1]))
    stats = {"tensors": 0, "equal": 0, "partsonly": 0, "undecoded": 0, "layouts": set()}
    failed = False
    for case in cases:
        for line in check(os.path.join(base, case["file"]), case["expected"], base, stats):
            print(line)
            failed = True
    layouts = ", ".join(sorted(stats["layouts"])) or "none"
    print(f"files {len(cases)}, tensors {stats['tensors']}, equal {stats['equal']}, "
          f"parts only {stats['partsonly']}, not decoded {stats['undecoded']} (layouts {layouts})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
