package mcf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// ModelInfo is the content of a ModelInfo section (docs/formats/mcf.md,
// "ModelInfo") as mantle's EncodeModelInfo writes it. No reader of mantle
// parses it; ztfs decodes it best-effort for the manifest and model_info.json.
type ModelInfo struct {
	// Flags is reserved (written 0).
	Flags uint32
	// Arch: 0 unknown, 1 LLaMA, 2 Mistral, 3 Qwen, 4 Gemma, 5 Granite,
	// 6 SmolLM3.
	Arch uint32

	VocabSize, HiddenSize, LayerCount, HeadCount, HeadCountKV uint32
	ContextLength, TrainContext                               uint32

	// RopeType: 0 none, 1 standard, 2 linear, 3 yarn.
	RopeType     uint32
	RopeFreqBase float32
	RopeScale    float32

	// ModelName and BaseModel are absent when empty.
	ModelName, BaseModel string

	// Extras are the key/value entries, sorted by key when encoded.
	Extras []KV
}

// KV value types.
const (
	KVUint32  uint32 = 1
	KVFloat32 uint32 = 2
	KVString  uint32 = 3
)

// KV is one ModelInfo key/value entry; Type says which value field holds
// the value.
type KV struct {
	Key    string
	Type   uint32
	U32    uint32
	F32    float32
	String string
}

// The ModelInfo layout: its version, the size of its fixed part and of one
// key/value table entry.
const (
	ModelInfoVersion   = 1
	ModelInfoFixedSize = 88
	ModelInfoKVSize    = 24
	// maxModelInfo bounds the section ztfs reads to decode it.
	maxModelInfo = 16 << 20
)

var archNames = []string{"unknown", "llama", "mistral", "qwen", "gemma", "granite", "smollm3"}
var ropeNames = []string{"none", "standard", "linear", "yarn"}

// DecodeModelInfo parses a ModelInfo section. It fails on a version other
// than 1 and on anything out of bounds; it never reads outside b, and the
// strings it returns total at most len(b) bytes.
func DecodeModelInfo(b []byte) (*ModelInfo, error) {
	if len(b) < ModelInfoFixedSize {
		return nil, fmt.Errorf("%d bytes, shorter than the %d-byte fixed part", len(b), ModelInfoFixedSize)
	}
	if v := le.Uint32(b); v != ModelInfoVersion {
		return nil, fmt.Errorf("unsupported ModelInfo version %d", v)
	}
	mi := &ModelInfo{
		Flags:         le.Uint32(b[4:]),
		Arch:          le.Uint32(b[8:]),
		VocabSize:     le.Uint32(b[16:]),
		HiddenSize:    le.Uint32(b[20:]),
		LayerCount:    le.Uint32(b[24:]),
		HeadCount:     le.Uint32(b[28:]),
		HeadCountKV:   le.Uint32(b[32:]),
		ContextLength: le.Uint32(b[36:]),
		TrainContext:  le.Uint32(b[40:]),
		RopeType:      le.Uint32(b[44:]),
		RopeFreqBase:  math.Float32frombits(le.Uint32(b[48:])),
		RopeScale:     math.Float32frombits(le.Uint32(b[52:])),
	}
	size := uint64(len(b))
	budget := size // bytes of strings still allowed
	blob := func(what string, off uint64) (string, error) {
		if off == 0 {
			return "", nil
		}
		if off > size || 4 > size-off {
			return "", fmt.Errorf("%s at %d: length outside the %d-byte section", what, off, size)
		}
		n := uint64(le.Uint32(b[off:]))
		if n > size-off-4 {
			return "", fmt.Errorf("%s at %d: %d bytes run past the end of the %d-byte section", what, off, n, size)
		}
		if n > budget {
			return "", fmt.Errorf("%s at %d: the strings total more than the section's %d bytes", what, off, size)
		}
		budget -= n
		return string(b[off+4 : off+4+n]), nil
	}
	var err error
	if mi.ModelName, err = blob("model name", le.Uint64(b[56:])); err != nil {
		return nil, err
	}
	if mi.BaseModel, err = blob("base model", le.Uint64(b[64:])); err != nil {
		return nil, err
	}
	count, kvOff := uint64(le.Uint32(b[72:])), le.Uint64(b[80:])
	if count == 0 {
		return mi, nil
	}
	if kvOff > size || count*ModelInfoKVSize > size-kvOff {
		return nil, fmt.Errorf("key/value table [%d, +%d entries) lies outside the %d-byte section", kvOff, count, size)
	}
	mi.Extras = make([]KV, count)
	for i := range mi.Extras {
		e := b[kvOff+uint64(i)*ModelInfoKVSize:]
		kv := &mi.Extras[i]
		if kv.Key, err = blob(fmt.Sprintf("key %d", i), le.Uint64(e)); err != nil {
			return nil, err
		}
		kv.Type = le.Uint32(e[8:])
		valOff := le.Uint64(e[16:])
		switch kv.Type {
		case KVUint32, KVFloat32:
			if valOff > size || 4 > size-valOff {
				return nil, fmt.Errorf("value of %q at %d lies outside the %d-byte section", kv.Key, valOff, size)
			}
			if kv.Type == KVUint32 {
				kv.U32 = le.Uint32(b[valOff:])
			} else {
				kv.F32 = math.Float32frombits(le.Uint32(b[valOff:]))
			}
		case KVString:
			if kv.String, err = blob(fmt.Sprintf("value of %q", kv.Key), valOff); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("key %q has unknown value type %d", kv.Key, kv.Type)
		}
	}
	return mi, nil
}

// JSON returns mi as JSON-ready values (the manifest's model_info and the
// content of model_info.json). Strings absent from the section are null;
// extras form an object keyed by key (the first of repeated keys wins).
func (mi *ModelInfo) JSON() map[string]any {
	str := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	extras := map[string]any{}
	for _, kv := range mi.Extras {
		if _, dup := extras[kv.Key]; dup {
			continue
		}
		switch kv.Type {
		case KVUint32:
			extras[kv.Key] = uint64(kv.U32)
		case KVFloat32:
			extras[kv.Key] = jsonFloat32(kv.F32)
		default:
			extras[kv.Key] = kv.String
		}
	}
	return map[string]any{
		"version":        uint64(ModelInfoVersion),
		"flags":          uint64(mi.Flags),
		"arch":           uint64(mi.Arch),
		"arch_name":      enumName(archNames, mi.Arch),
		"vocab_size":     uint64(mi.VocabSize),
		"hidden_size":    uint64(mi.HiddenSize),
		"layer_count":    uint64(mi.LayerCount),
		"head_count":     uint64(mi.HeadCount),
		"head_count_kv":  uint64(mi.HeadCountKV),
		"context_length": uint64(mi.ContextLength),
		"train_context":  uint64(mi.TrainContext),
		"rope_type":      uint64(mi.RopeType),
		"rope_type_name": enumName(ropeNames, mi.RopeType),
		"rope_freq_base": jsonFloat32(mi.RopeFreqBase),
		"rope_scale":     jsonFloat32(mi.RopeScale),
		"model_name":     str(mi.ModelName),
		"base_model":     str(mi.BaseModel),
		"extras":         extras,
	}
}

// jsonText renders mi as the content of model_info.json.
func (mi *ModelInfo) jsonText() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(mi.JSON()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func enumName(names []string, v uint32) any {
	if uint64(v) < uint64(len(names)) {
		return names[v]
	}
	return nil
}

// jsonFloat32 turns a float32 into a JSON-ready value: the float64 whose
// shortest decimal is the float32's (1.4965889, not 1.496588945388794), or
// "NaN", "+Inf", "-Inf".
func jsonFloat32(f float32) any {
	switch {
	case f != f:
		return "NaN"
	case math.IsInf(float64(f), 1):
		return "+Inf"
	case math.IsInf(float64(f), -1):
		return "-Inf"
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return v
}
