package tensogramwrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
	"github.com/ztfs/ztfs/internal/codec/bitmask"
	"github.com/ztfs/ztfs/internal/codec/lz4block"
	"github.com/ztfs/ztfs/internal/codec/shuffle"
	"github.com/ztfs/ztfs/internal/codec/simplepacking"
	"github.com/ztfs/ztfs/internal/codec/szip"
)

// Data objects: checked, run through masks, encoding, filter and
// compression, and framed.

// encodedObject is one object run through the pipeline and framed.
type encodedObject struct {
	frame []byte
	hash  uint64         // the frame's hash slot (0 when not hashing)
	base  map[string]any // its base[i] entry, with _reserved_.tensor
	// For tests: the encoded payload and the mask blobs as stored.
	payload []byte
	masks   map[string][]byte
}

// writerKeys are descriptor keys the writer sets; Params must not use them.
var writerKeys = map[string]bool{
	"type": true, "ndim": true, "shape": true, "strides": true, "dtype": true, "byte_order": true,
	"encoding": true, "filter": true, "compression": true, "masks": true,
	"sp_reference_value": true, "sp_binary_scale_factor": true, "sp_decimal_scale_factor": true, "sp_bits_per_value": true,
	"reference_value": true, "binary_scale_factor": true, "decimal_scale_factor": true, "bits_per_value": true,
	"shuffle_element_size": true, "zstd_level": true,
	"szip_rsi": true, "szip_block_size": true, "szip_flags": true, "szip_block_offsets": true,
}

// maskableDtypes are the dtypes NaN/Inf masks apply to
// (docs/formats/tensogram.md, "Decoding").
var maskableDtypes = map[string]bool{
	"float16": true, "bfloat16": true, "float32": true, "float64": true, "complex64": true, "complex128": true,
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// objectPlan is a validated object: its dtype, element count, strides
// and pipeline step names.
type objectPlan struct {
	dt                            wire.DType
	n                             uint64
	strides                       []uint64
	encoding, filter, compression string
	sp                            bool // encoding is simple_packing
}

// checkObject validates o against docs/formats/tensogram.md ("Data objects" to
// "Decoding") and the combinations upstream rejects, before anything is encoded.
func checkObject(o *Object) (*objectPlan, error) {
	dt, ok := wire.DTypeOf(o.DType)
	if !ok {
		return nil, fmt.Errorf("unknown dtype %q", o.DType)
	}
	isBitmask := o.DType == "bitmask"
	n, err := formats.ElementCount(o.Shape)
	if err != nil {
		return nil, err
	}
	strides := o.Strides
	if strides == nil {
		strides = rowMajor(o.Shape)
	} else if len(strides) != len(o.Shape) {
		return nil, fmt.Errorf("%d strides for %d dimensions", len(strides), len(o.Shape))
	}
	var want uint64
	if isBitmask {
		want = bitmask.PackedLen(n)
	} else if want, err = wire.Size(n, dt.Width); err != nil {
		return nil, err
	}
	if uint64(len(o.Data)) != want {
		return nil, fmt.Errorf("data is %d bytes but %d %s elements (shape %v) need %d", len(o.Data), n, o.DType, o.Shape, want)
	}
	if isBitmask && n%8 != 0 && o.Data[len(o.Data)-1]&(0xFF>>(n%8)) != 0 {
		return nil, fmt.Errorf("bitmask data has bits set after element %d; trailing bits must be zero", n)
	}

	encoding, filter, compression := orNone(o.Encoding), orNone(o.Filter), orNone(o.Compression)
	sp := false
	switch encoding {
	case "none":
		if o.Bits != 0 || o.DecimalScale != 0 {
			return nil, errors.New("Bits and DecimalScale apply to simple_packing only")
		}
	case "simple_packing":
		if o.DType != "float64" {
			return nil, fmt.Errorf("simple_packing applies to float64 only, not %s", o.DType)
		}
		if o.Bits < 0 || o.Bits > simplepacking.MaxBits {
			return nil, fmt.Errorf("simple_packing bits per value %d is outside 0..%d", o.Bits, simplepacking.MaxBits)
		}
		sp = true
	default:
		return nil, fmt.Errorf("unknown encoding %q (want none or simple_packing)", o.Encoding)
	}
	switch filter {
	case "none":
	case "shuffle":
		if isBitmask {
			return nil, errors.New("shuffle does not apply to the bitmask dtype")
		}
		if sp && o.Bits == 0 {
			return nil, errors.New("shuffle after simple_packing needs at least 1 bit per value")
		}
	default:
		return nil, fmt.Errorf("unknown filter %q (want none or shuffle)", o.Filter)
	}
	switch compression {
	case "none", "zstd", "lz4":
	case "szip":
		if isBitmask {
			return nil, errors.New("szip does not apply to the bitmask dtype")
		}
	case "rle", "roaring":
		if !isBitmask || sp || filter != "none" {
			return nil, fmt.Errorf("compression %s applies to unfiltered bitmask objects only", compression)
		}
	case "blosc2", "zfp", "sz3":
		return nil, fmt.Errorf("compression %s is not supported by this writer", compression)
	default:
		return nil, fmt.Errorf("unknown compression %q", o.Compression)
	}
	if compression != "szip" && (o.Szip != nil || o.SzipBlockOffsets) {
		return nil, fmt.Errorf("szip parameters given with compression %s", compression)
	}
	if compression != "zstd" && o.ZstdLevel != 0 {
		return nil, fmt.Errorf("ZstdLevel given with compression %s", compression)
	}
	if o.Masks != "" {
		if !maskableDtypes[o.DType] {
			return nil, fmt.Errorf("NaN/Inf masks apply to float and complex dtypes, not %s", o.DType)
		}
		if _, ok := wire.MaskMethod(o.Masks); !ok {
			return nil, fmt.Errorf("unknown or unsupported mask method %q (want none, rle, roaring, zstd or lz4)", o.Masks)
		}
	}
	if o.MaskThreshold < 0 {
		return nil, fmt.Errorf("negative MaskThreshold %d", o.MaskThreshold)
	}
	if _, ok := o.Metadata["_reserved_"]; ok {
		return nil, errors.New(`metadata must not have a "_reserved_" key; the writer fills it`)
	}
	for k := range o.Params {
		if writerKeys[k] {
			return nil, fmt.Errorf("descriptor parameter %q is set by the writer", k)
		}
	}
	return &objectPlan{dt: dt, n: n, strides: strides, encoding: encoding, filter: filter, compression: compression, sp: sp}, nil
}

// encodeObject validates o, runs masks → encoding → filter → compression
// (docs/formats/tensogram.md, "Decoding"), and builds its data-object frame.
func encodeObject(o *Object, hashing bool) (*encodedObject, error) {
	plan, err := checkObject(o)
	if err != nil {
		return nil, err
	}
	dt, n, strides, sp := plan.dt, plan.n, plan.strides, plan.sp
	encoding, filter, compression := plan.encoding, plan.filter, plan.compression

	byteOrder := "little"
	if o.BigEndian {
		byteOrder = "big"
	}
	desc := map[string]any{
		"type": "ntensor", "ndim": uint64(len(o.Shape)), "shape": nonNil(o.Shape), "strides": nonNil(strides),
		"dtype": o.DType, "byte_order": byteOrder,
		"encoding": encoding, "filter": filter, "compression": compression,
	}
	for k, v := range o.Params {
		desc[k] = v
	}

	// Masks (docs/formats/tensogram.md, "Decoding"): substitute zeros, remember
	// the positions.
	data := o.Data
	var maskElems map[string][]byte
	if o.Masks != "" {
		data, maskElems = substituteNonFinite(o.Data, o.DType, o.BigEndian, n)
	}

	// Encoding.
	stage := data
	if sp {
		values := make([]float64, n)
		order := byteOrderOf(o.BigEndian)
		for i := range values {
			v := math.Float64frombits(order.Uint64(data[8*i:]))
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("value %d is %v: simple_packing packs finite values only (set Masks to record NaN/Inf in masks)", i, v)
			}
			values[i] = v
		}
		p, packed, err := simplepacking.Encode(values, o.Bits, o.DecimalScale)
		if err != nil {
			return nil, err
		}
		desc["sp_reference_value"] = p.Reference
		desc["sp_binary_scale_factor"] = int64(p.BinaryScale)
		desc["sp_decimal_scale_factor"] = int64(p.DecimalScale)
		desc["sp_bits_per_value"] = uint64(p.Bits)
		stage = packed
		if stage == nil {
			stage = []byte{}
		}
	}

	// Filter.
	if filter == "shuffle" {
		size := int(dt.Width)
		if sp {
			size = (o.Bits + 7) / 8
		}
		out := make([]byte, len(stage))
		if err := shuffle.Shuffle(out, stage, size); err != nil {
			return nil, fmt.Errorf("shuffle: %w", err)
		}
		desc["shuffle_element_size"] = uint64(size)
		stage = out
	}

	// Compression.
	payload := stage
	switch compression {
	case "zstd":
		level := o.ZstdLevel
		if level == 0 {
			level = 3
		}
		zenc, err := zstdEncoder(level)
		if err != nil {
			return nil, err
		}
		payload = zenc.EncodeAll(stage, nil)
		desc["zstd_level"] = int64(level)
	case "lz4":
		if payload, err = lz4block.Encode(stage); err != nil {
			return nil, err
		}
	case "szip":
		var offsets []uint64
		if payload, offsets, err = szipEncode(stage, o, sp, dt, filter == "shuffle", desc); err != nil {
			return nil, err
		}
		if o.SzipBlockOffsets {
			desc["szip_block_offsets"] = nonNil(offsets)
		}
	case "rle", "roaring":
		if payload, err = bitmask.EncodeCompressed(compression, stage, n); err != nil {
			return nil, err
		}
	}

	// Payload region: payload, then the masks in the order nan, inf+, inf-.
	region := append([]byte(nil), payload...)
	enc := &encodedObject{payload: payload}
	if len(maskElems) > 0 {
		masks := map[string]any{}
		enc.masks = map[string][]byte{}
		for _, kind := range wire.MaskKinds() {
			elems, ok := maskElems[kind]
			if !ok {
				continue
			}
			packed := bitmask.Pack(elems)
			method := o.Masks
			if o.MaskThreshold > 0 && len(packed) <= o.MaskThreshold {
				method = "none"
			}
			blob, err := bitmask.EncodeMask(method, packed, n)
			if err != nil {
				return nil, fmt.Errorf("mask %s: %w", kind, err)
			}
			masks[kind] = map[string]any{"method": method, "offset": uint64(len(region)), "length": uint64(len(blob))}
			enc.masks[kind] = blob
			region = append(region, blob...)
		}
		desc["masks"] = masks
	}

	descCBOR, err := encMode.Marshal(desc)
	if err != nil {
		return nil, fmt.Errorf("descriptor: %w", err)
	}
	enc.frame, enc.hash = dataFrame(descCBOR, region, o.DescriptorFirst, hashing)
	entry := userMetadata(o.Metadata)
	entry["_reserved_"] = map[string]any{"tensor": map[string]any{
		"ndim": uint64(len(o.Shape)), "shape": nonNil(o.Shape), "strides": nonNil(strides), "dtype": o.DType,
	}}
	// Fail now rather than when the footer of a streaming message is
	// written, half the message later.
	if _, err := encMode.Marshal(entry); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	enc.base = entry
	return enc, nil
}

// zstdEncoders are shared by level: EncodeAll may be called concurrently.
var (
	zstdMu       sync.Mutex
	zstdEncoders = map[zstd.EncoderLevel]*zstd.Encoder{}
)

// zstdEncoder returns an encoder for a zstd level (libzstd numbering,
// mapped to the nearest of the four levels klauspost/compress has). Every
// frame it writes is complete, even for empty input.
func zstdEncoder(level int) (*zstd.Encoder, error) {
	l := zstd.EncoderLevelFromZstd(level)
	zstdMu.Lock()
	defer zstdMu.Unlock()
	if e, ok := zstdEncoders[l]; ok {
		return e, nil
	}
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(l), zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	zstdEncoders[l] = e
	return e, nil
}

// szipEncode codes stage with szip, adding its parameters to desc. The bits per
// sample follow docs/formats/tensogram.md, "Decoding": B after simple_packing,
// 8 after shuffle, the dtype width otherwise; the reader's (*descriptor).szip
// derives the same.
func szipEncode(stage []byte, o *Object, sp bool, dt wire.DType, shuffled bool, desc map[string]any) ([]byte, []uint64, error) {
	p := SzipParams{RSI: 128, BlockSize: 16, Flags: szip.FlagPreprocess}
	if o.Szip != nil {
		p = *o.Szip
	}
	if p.Flags < 0 || p.Flags > math.MaxUint16 {
		return nil, nil, fmt.Errorf("szip flags %d are outside 0..65535", p.Flags)
	}
	aec := szip.Params{RSI: p.RSI, BlockSize: p.BlockSize, Flags: p.Flags}
	switch {
	case sp:
		// Upstream hands the packed stream to libaec as B-bit samples
		// (most significant byte first), which only codes the values
		// faithfully when they are whole bytes.
		if o.Bits%8 != 0 || o.Bits == 0 || o.Bits > 32 {
			return nil, nil, fmt.Errorf("szip after simple_packing needs 8, 16, 24 or 32 bits per value, not %d", o.Bits)
		}
		aec.BitsPerSample = o.Bits
		aec.Flags |= szip.FlagMSB
	case shuffled:
		aec.BitsPerSample = 8
	default:
		aec.BitsPerSample = int(dt.Width * 8)
		if aec.BitsPerSample > 32 {
			return nil, nil, fmt.Errorf("szip cannot code %d-bit samples; add the shuffle filter", aec.BitsPerSample)
		}
	}
	if aec.BitsPerSample > 16 && aec.BitsPerSample <= 24 {
		aec.Flags |= szip.Flag3Byte
	}
	if err := aec.Validate(); err != nil {
		return nil, nil, err
	}
	desc["szip_rsi"] = uint64(p.RSI)
	desc["szip_block_size"] = uint64(p.BlockSize)
	desc["szip_flags"] = uint64(p.Flags)
	if len(stage) == 0 {
		// Upstream skips libaec for empty input: an empty stream.
		return []byte{}, nil, nil
	}
	stream, offsets, err := szip.Encode(stage, aec)
	if err != nil {
		return nil, nil, err
	}
	return stream, offsets, nil
}

// dataFrame builds an NTensorFrame (docs/formats/tensogram.md, "Data objects")
// and returns it with its hash slot.
func dataFrame(desc, region []byte, descFirst, hashing bool) ([]byte, uint64) {
	var flags uint16
	if !descFirst {
		flags |= wire.FrameCBORAfterPayload
	}
	if hashing {
		flags |= wire.FrameHashPresent
	}
	total := uint64(wire.FrameHeaderSize + len(desc) + len(region) + 20)
	f := make([]byte, 0, total)
	f = appendFrameHeader(f, wire.TypeData, flags, total)
	cborOffset := uint64(wire.FrameHeaderSize)
	if descFirst {
		f = append(append(f, desc...), region...)
	} else {
		f = append(append(f, region...), desc...)
		cborOffset += uint64(len(region))
	}
	var h uint64
	if hashing {
		h = xxh3.Hash(f[wire.FrameHeaderSize:])
	}
	f = binary.BigEndian.AppendUint64(f, cborOffset)
	f = binary.BigEndian.AppendUint64(f, h)
	return append(f, wire.FrameEnd...), h
}

func rowMajor(shape []uint64) []uint64 {
	s := make([]uint64, len(shape))
	acc := uint64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i] // cannot overflow: the element count did not
	}
	return s
}

func byteOrderOf(big bool) binary.ByteOrder {
	if big {
		return binary.BigEndian
	}
	return binary.LittleEndian
}
