#!/usr/bin/env bash
# The demo: builds ztfs, writes a small sample model, mounts it, shows the
# tree, reads tensors with jq and with NumPy, and unmounts; then the same
# for a bundled Tensogram file, a bundled quantized MCF model (and its root
# model.safetensors) and a sharded checkpoint folder; then
# converts the sample to zTensor v2 and checks a mount of it shows the same
# tensors.
# Usage: scripts/demo.sh            (installs fuse3, jq, python3-numpy if missing;
#                                    needs the Go of go.mod's go line)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_go
ensure_packages fuse3 jq python3-numpy
python=$(python_with_numpy)

mkdir -p bin
go build -o bin/ztfs ./cmd/ztfs
work=$(mktemp -d /tmp/ztfs-demo.XXXXXX)
mnt=$work/mnt
mkdir "$mnt"
cleanup() {
  if grep -qs " $mnt fuse.ztfs " /proc/self/mounts; then bin/ztfs unmount -z "$mnt" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

go run ./scripts/ztgen sample "$work/sample.zt"
step ztfs inspect sample.zt
bin/ztfs inspect "$work/sample.zt"

step ztfs mount sample.zt mnt
bin/ztfs mount "$work/sample.zt" "$mnt"

step find mnt
(cd "$work" && find mnt | sort)

q='.tensors | to_entries[] | {name: .key, shape: .value.shape, dtype: .value.dtype, layout: .value.layout, npy: .value.npy.dtype}'
step "jq -c '$q' mnt/manifest.json"
jq -c "$q" "$mnt/manifest.json"

step "jq -r '.tensors[\"layers.0.bias\"].components.data.path' mnt/manifest.json  # then od it"
bias=$(jq -r '.tensors["layers.0.bias"].components.data.path' "$mnt/manifest.json")
echo "$bias"
od -A d -t f4 "$mnt/$bias"

step python3 -c 'numpy.load(...)'
"$python" - "$mnt" <<'PY'
import json, os, sys
import numpy as np
mnt = sys.argv[1]
manifest = json.load(open(os.path.join(mnt, "manifest.json")))
for name, t in manifest["tensors"].items():
    a = np.load(os.path.join(mnt, t["npy"]["path"]), mmap_mode="r")
    print(f"{name:16} {str(a.dtype):8} {str(a.shape):10} sum={float(np.asarray(a, dtype=np.float64).sum()):.4f}")
print("sparse mask.sparse densified:\n", np.load(os.path.join(mnt, "tensors/mask.sparse/tensor.npy")))
PY

step ztfs unmount mnt
bin/ztfs unmount "$mnt"

# A Tensogram file from ECMWF's reference writer (bundled in testdata/).
tgm=testdata/tensogram/metadata_parity/metadata_parity.tgm
step ztfs mount $tgm mnt
bin/ztfs mount "$tgm" "$mnt"
step find mnt
(cd "$work" && find mnt | sort)
step "jq -c '.base[] | {shortName, mars}' mnt/tensors/0/metadata.json"
jq -c '.base[] | {shortName, mars}' "$mnt/tensors/0/metadata.json"
step python3 -c 'numpy.load("mnt/tensors/0/2t/tensor.npy")'
"$python" -c 'import sys, numpy as np; a = np.load(sys.argv[1]); print(a.dtype, a.shape, a.sum())' "$mnt/tensors/0/2t/tensor.npy"
step ztfs unmount mnt
bin/ztfs unmount "$mnt"

# An MCF file with k4-quantized weights: a model folder, dequantized on read.
mcf=testdata/mcf/tiny_k4.mcf
step ztfs mount $mcf mnt
bin/ztfs mount "$mcf" "$mnt"
step ls mnt mnt/tensors/model.embed_tokens.weight
ls "$mnt" "$mnt/tensors/model.embed_tokens.weight"
step "jq -c '.tensors[\"model.embed_tokens.weight\"] | {layout, dtype, shape, method: .attributes.method, clip: [.attributes.min_clip, .attributes.max_clip]}' mnt/manifest.json"
jq -c '.tensors["model.embed_tokens.weight"] | {layout, dtype, shape, method: .attributes.method, clip: [.attributes.min_clip, .attributes.max_clip]}' "$mnt/manifest.json"
step python3 -c 'numpy.load("mnt/tensors/model.embed_tokens.weight/tensor.npy")'
"$python" -c 'import sys, numpy as np; a = np.load(sys.argv[1]); print(a.dtype, a.shape, a[0, :4])' "$mnt/tensors/model.embed_tokens.weight/tensor.npy"
step "the root's model.safetensors, read as a safetensors loader reads it (header, then memory-mapped data)"
"$python" - "$mnt/model.safetensors" <<'PY'
import json, struct, sys, numpy as np
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
print("__metadata__:", h.pop("__metadata__"))
mm = np.memmap(sys.argv[1], dtype=np.uint8, mode="r")
t = h["model.embed_tokens.weight"]; b, e = t["data_offsets"]
print("model.embed_tokens.weight", t["dtype"], t["shape"], np.frombuffer(mm[8 + n + b: 8 + n + e], "<f4").reshape(t["shape"])[0, :4])
PY
step ztfs unmount mnt
bin/ztfs unmount "$mnt"

# A sharded checkpoint folder (as save_pretrained writes one): one tree.
"$python" testdata/folders/make_checkpoint.py "$work/checkpoint" --shard-size 60000
step ls checkpoint
ls "$work/checkpoint"
step ztfs mount checkpoint mnt
bin/ztfs mount "$work/checkpoint" "$mnt"
step ls mnt
ls "$mnt"
step "jq -c '[.sources[] | .path | split(\"/\") | last], .tensors[\"lm_head.weight\"].source' mnt/manifest.json"
jq -c '[.sources[] | .path | split("/") | last], .tensors["lm_head.weight"].source' "$mnt/manifest.json"
step "cmp checkpoint/model-00001-of-00005.safetensors mnt/model-00001-of-00005.safetensors"
cmp "$work/checkpoint/model-00001-of-00005.safetensors" "$mnt/model-00001-of-00005.safetensors" && echo "same bytes"
step ztfs unmount mnt
bin/ztfs unmount "$mnt"

# Any of these files as a zTensor v2 file, with the same tensors.
step ztfs convert sample.zt sample-v2.zt
bin/ztfs convert "$work/sample.zt" "$work/sample-v2.zt"
step ztfs inspect sample-v2.zt
bin/ztfs inspect "$work/sample-v2.zt"
step "cmp: every tensor.npy of sample.zt and sample-v2.zt"
for name in $(jq -r '.tensors | keys[]' <(bin/ztfs inspect --json "$work/sample.zt")); do
  path=$(jq -r --arg n "$name" '.tensors[$n].npy.path' <(bin/ztfs inspect --json "$work/sample.zt"))
  cmp <(bin/ztfs cat "$work/sample.zt" "$path") <(bin/ztfs cat "$work/sample-v2.zt" "$path")
  echo "$path: same bytes"
done
echo "done"
