package mcfwrite

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ztfs/ztfs/formats/mcf"
)

// EncodeModelInfo lays mi out as mantle's EncodeModelInfo does: the fixed
// part, the model name and base model blobs, each extra's key and value in
// key order (8-aligned, zero-padded), then the key/value table. Like mantle
// it refuses empty or repeated keys and non-finite float values.
func EncodeModelInfo(mi *mcf.ModelInfo) ([]byte, error) {
	if mi == nil {
		return nil, errors.New("ModelInfo: nil")
	}
	out := make([]byte, mcf.ModelInfoFixedSize)
	pad := func() {
		for len(out)%8 != 0 {
			out = append(out, 0)
		}
	}
	addString := func(s string) (uint64, error) {
		if s == "" {
			return 0, nil // mantle writes empty strings as absent
		}
		if uint64(len(s)) > math.MaxUint32 {
			return 0, errors.New("ModelInfo: string longer than 4 GiB")
		}
		pad()
		off := uint64(len(out))
		out = le.AppendUint32(out, uint32(len(s)))
		out = append(out, s...)
		pad()
		return off, nil
	}
	add32 := func(v uint32) uint64 {
		pad()
		off := uint64(len(out))
		out = le.AppendUint32(out, v)
		pad()
		return off
	}
	nameOff, err := addString(mi.ModelName)
	if err != nil {
		return nil, err
	}
	baseOff, err := addString(mi.BaseModel)
	if err != nil {
		return nil, err
	}
	kvs := slices.Clone(mi.Extras)
	slices.SortStableFunc(kvs, func(a, b mcf.KV) int { return strings.Compare(a.Key, b.Key) })
	table := make([]byte, 0, mcf.ModelInfoKVSize*len(kvs))
	for i, kv := range kvs {
		if kv.Key == "" {
			return nil, errors.New("ModelInfo: empty extras key")
		}
		if i > 0 && kvs[i-1].Key == kv.Key {
			return nil, fmt.Errorf("ModelInfo: extras key %q appears twice", kv.Key)
		}
		keyOff, err := addString(kv.Key)
		if err != nil {
			return nil, err
		}
		var valOff uint64
		switch kv.Type {
		case mcf.KVUint32:
			valOff = add32(kv.U32)
		case mcf.KVFloat32:
			if f := float64(kv.F32); math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("ModelInfo: extras[%q]: invalid float32 %v", kv.Key, kv.F32)
			}
			valOff = add32(math.Float32bits(kv.F32))
		case mcf.KVString:
			if valOff, err = addString(kv.String); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("ModelInfo: extras[%q]: unknown value type %d", kv.Key, kv.Type)
		}
		table = le.AppendUint64(table, keyOff)
		table = le.AppendUint32(table, kv.Type)
		table = le.AppendUint32(table, 0)
		table = le.AppendUint64(table, valOff)
	}
	pad()
	kvOff := uint64(len(out))
	out = append(out, table...)

	le.PutUint32(out[0:], mcf.ModelInfoVersion)
	le.PutUint32(out[4:], mi.Flags)
	le.PutUint32(out[8:], mi.Arch)
	for i, v := range []uint32{mi.VocabSize, mi.HiddenSize, mi.LayerCount, mi.HeadCount, mi.HeadCountKV,
		mi.ContextLength, mi.TrainContext, mi.RopeType,
		math.Float32bits(mi.RopeFreqBase), math.Float32bits(mi.RopeScale)} {
		le.PutUint32(out[16+4*i:], v)
	}
	le.PutUint64(out[56:], nameOff)
	le.PutUint64(out[64:], baseOff)
	le.PutUint32(out[72:], uint32(len(kvs)))
	le.PutUint64(out[80:], kvOff)
	return out, nil
}
