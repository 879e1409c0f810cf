"""Writes a sharded safetensors checkpoint folder the way transformers'
save_pretrained(max_shard_size=...) lays one out: shards named
model-0000k-of-0000n.safetensors, each a safetensors file whose header is
padded to 8 bytes with spaces, tensors in the order the safetensors writer
uses (dtype size descending, then name), and model.safetensors.index.json
with metadata.total_size and a sorted weight_map. Also config.json and a
tokenizer file. Written with NumPy only, independently of ztfs.

usage: make_checkpoint.py DIR [--shard-size BYTES] [--scale N] [--layers N] [--single]
"""
import argparse, json, os, struct
import numpy as np

def bf16(a):
    """float32 -> bfloat16 bit patterns (round to nearest even), as uint16."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)

def tensors(scale, layers, rng):
    """A llama-shaped model: embeddings, layers, norms; bf16 and f32."""
    h = 64 * scale
    out = {}
    out["model.embed_tokens.weight"] = ("BF16", [256, h], bf16(rng.standard_normal((256, h), dtype=np.float32)))
    for i in range(layers):
        p = f"model.layers.{i}."
        for n, shape in [("self_attn.q_proj.weight", [h, h]), ("self_attn.k_proj.weight", [h // 2, h]),
                         ("self_attn.v_proj.weight", [h // 2, h]), ("self_attn.o_proj.weight", [h, h]),
                         ("mlp.gate_proj.weight", [2 * h, h]), ("mlp.up_proj.weight", [2 * h, h]),
                         ("mlp.down_proj.weight", [h, 2 * h])]:
            out[p + n] = ("BF16", shape, bf16(rng.standard_normal(shape, dtype=np.float32)))
        out[p + "input_layernorm.weight"] = ("F32", [h], rng.standard_normal(h).astype("<f4"))
        out[p + "post_attention_layernorm.weight"] = ("F32", [h], rng.standard_normal(h).astype("<f4"))
    out["model.norm.weight"] = ("F32", [h], rng.standard_normal(h).astype("<f4"))
    out["lm_head.weight"] = ("F16", [256, h], rng.standard_normal((256, h)).astype("<f2"))
    out["model.rotary.step"] = ("I64", [], np.array(7, dtype="<i8"))
    return out

SIZE = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8}

def write_safetensors(path, items):
    order = sorted(items, key=lambda kv: (-SIZE[kv[1][0]], kv[0]))
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, (dt, shape, arr) in order:
        n = arr.nbytes
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, (dt, shape, arr) in order:
            f.write(np.ascontiguousarray(arr).tobytes())

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--shard-size", type=int, default=100_000)
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--single", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    ts = tensors(a.scale, a.layers, np.random.default_rng(14))
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "hidden_size": 64 * a.scale, "num_hidden_layers": 2}, f)
    with open(os.path.join(a.dir, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"vocab": {"a": 0, "b": 1}}}, f)
    if a.single:
        write_safetensors(os.path.join(a.dir, "model.safetensors"), list(ts.items()))
        return
    # save_pretrained's split: tensors in name order, a new shard when the
    # next tensor would push this one past the limit.
    shards, cur, size = [], [], 0
    for name in sorted(ts):
        n = ts[name][2].nbytes
        if cur and size + n > a.shard_size:
            shards.append(cur)
            cur, size = [], 0
        cur.append(name)
        size += n
    shards.append(cur)
    weight_map, total = {}, 0
    for k, names in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(a.dir, fname), [(n, ts[n]) for n in names])
        for n in names:
            weight_map[n] = fname
            total += ts[n][2].nbytes
    with open(os.path.join(a.dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")

if __name__ == "__main__":
    main()
