package tensogram

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/tensogram/wire"
)

// object is one data-object frame with its descriptor.
type object struct {
	frame  *frame
	desc   *descriptor
	hashed bool
	// region is the payload region (encoded payload, then mask blobs) and
	// payload the encoded payload within it; absolute offsets.
	regionOff, regionLen   uint64
	payloadOff, payloadLen uint64
}

// readObject reads a data frame's descriptor and locates its payload
// (docs/formats/tensogram.md, "Data objects").
func readObject(f *file, fr *frame, hashed bool) (*object, error) {
	o := &object{frame: fr, hashed: hashed}
	end := fr.len - fr.tail() // frame-relative end of the body
	if fr.cborOffset < wire.FrameHeaderSize || fr.cborOffset > end {
		return nil, fmt.Errorf("cbor_offset %d is outside the frame body [%d, %d]", fr.cborOffset, wire.FrameHeaderSize, end)
	}
	var descBytes []byte
	if fr.flags&wire.FrameCBORAfterPayload != 0 {
		n := end - fr.cborOffset
		if n > maxCBOR {
			return nil, fmt.Errorf("%d-byte descriptor exceeds the %d-byte limit", n, maxCBOR)
		}
		b, err := f.read(fr.off+fr.cborOffset, n)
		if err != nil {
			return nil, err
		}
		descBytes = b
		o.regionOff, o.regionLen = fr.off+wire.FrameHeaderSize, fr.cborOffset-wire.FrameHeaderSize
	} else {
		// The descriptor comes first; its length is that of one CBOR item,
		// found by reading more of the frame until it parses.
		avail := end - fr.cborOffset
		for n := min(avail, 4096); ; n = min(avail, n*4) {
			b, err := f.read(fr.off+fr.cborOffset, n)
			if err != nil {
				return nil, err
			}
			var item any
			rest, err := decMode.UnmarshalFirst(b, &item)
			if err == nil {
				descBytes = b[:len(b)-len(rest)]
				break
			}
			if n == avail || n >= maxCBOR {
				return nil, fmt.Errorf("descriptor before the payload: invalid CBOR: %w", err)
			}
		}
		start := fr.cborOffset + uint64(len(descBytes))
		o.regionOff, o.regionLen = fr.off+start, end-start
	}
	v, err := decodeCBOR(descBytes)
	if err != nil {
		return nil, fmt.Errorf("descriptor: %w", err)
	}
	if o.desc, err = parseDescriptor(v); err != nil {
		return nil, err
	}
	o.payloadOff, o.payloadLen = o.regionOff, o.regionLen
	for kind, m := range o.desc.masks {
		if m.offset > o.regionLen || m.length > o.regionLen-m.offset {
			return nil, fmt.Errorf("mask %s blob [%d, +%d) lies outside the %d-byte payload region", kind, m.offset, m.length, o.regionLen)
		}
		o.payloadLen = min(o.payloadLen, m.offset)
	}
	// The size gate (docs/formats/tensogram.md, "Decoding"): without
	// compression the payload length follows from the descriptor (a shuffle
	// keeps the size). Invalid packing parameters are left to plan, which keeps
	// such objects raw.
	if d := o.desc; d.compression == "none" && (d.filter == "none" || d.filter == "shuffle") {
		want, ok, err := o.desc.encodedSize()
		if err == nil && ok && want != o.payloadLen {
			return nil, fmt.Errorf("payload is %d bytes but %d %s elements (encoding %s) need %d",
				o.payloadLen, o.desc.elements, o.desc.dtypeName, o.desc.encoding, want)
		}
	}
	return o, nil
}

// encodedSize is the size of the payload after decompression and
// unshuffling: ok is false for an encoding ztfs does not know.
func (d *descriptor) encodedSize() (size uint64, ok bool, err error) {
	switch d.encoding {
	case "none":
		size, err = d.decodedSize()
		return size, true, err
	case "simple_packing":
		sp, err := d.simplePacking()
		if err != nil {
			return 0, true, err
		}
		hi, lo := bits.Mul64(d.elements, uint64(sp.Bits))
		if hi != 0 || lo > math.MaxUint64-7 {
			return 0, true, fmt.Errorf("%d values of %d bits overflow 64 bits", d.elements, sp.Bits)
		}
		return lo/8 + boolToUint(lo%8 != 0), true, nil
	}
	return 0, false, nil
}

// simplePacking reads the simple_packing parameters (docs/formats/tensogram.md,
// "Decoding").
func (d *descriptor) simplePacking() (formats.SimpleUnpack, error) {
	sp := formats.SimpleUnpack{Count: d.elements}
	get := func(name string) (any, error) {
		v, ok := d.param(name)
		if !ok {
			return nil, fmt.Errorf("simple_packing lacks sp_%s", name)
		}
		return v, nil
	}
	v, err := get("bits_per_value")
	if err != nil {
		return sp, err
	}
	b, err := asUint(v, "sp_bits_per_value")
	if err != nil {
		return sp, err
	}
	if b > 64 {
		return sp, fmt.Errorf("sp_bits_per_value %d exceeds 64", b)
	}
	sp.Bits = int(b)
	if v, err = get("reference_value"); err != nil {
		return sp, err
	}
	if sp.Reference, err = asFloat(v, "sp_reference_value"); err != nil {
		return sp, err
	}
	if math.IsNaN(sp.Reference) || math.IsInf(sp.Reference, 0) {
		return sp, fmt.Errorf("sp_reference_value %v is not finite", sp.Reference)
	}
	if v, err = get("binary_scale_factor"); err != nil {
		return sp, err
	}
	e, err := asInt(v, "sp_binary_scale_factor")
	if err != nil {
		return sp, err
	}
	if e < -4096 || e > 4096 {
		return sp, fmt.Errorf("sp_binary_scale_factor %d is out of range", e)
	}
	sp.BinaryScale = int(e)
	if v, ok := d.param("decimal_scale_factor"); ok {
		ds, err := asInt(v, "sp_decimal_scale_factor")
		if err != nil {
			return sp, err
		}
		if ds < -4096 || ds > 4096 {
			return sp, fmt.Errorf("sp_decimal_scale_factor %d is out of range", ds)
		}
		sp.DecimalScale = int(ds)
	}
	return sp, nil
}

// errUnsupported marks a reason the object cannot be decoded that leaves it
// listed with its payload (docs/formats/tensogram.md, "Decoding"), as opposed
// to a corrupt file.
type errUnsupported struct{ reason string }

func (e errUnsupported) Error() string { return e.reason }

func unsupported(format string, args ...any) error {
	return errUnsupported{fmt.Sprintf(format, args...)}
}

// decoding is how the object's data file is made from its payload.
type decoding struct {
	encoding  formats.Encoding
	codecs    []formats.Codec
	bigEndian bool
	masks     *formats.Masks
}

// plan works out the decoding steps (docs/formats/tensogram.md, "Decoding"):
// decompress, unshuffle, unpack, byte swap, masks. An errUnsupported says why
// the object stays raw.
func (o *object) plan() (*decoding, error) {
	d := o.desc
	dec := &decoding{encoding: formats.Raw}
	isBitmask := d.dt.DType == formats.Bitmask
	encoded, known, err := d.encodedSize()
	if err != nil {
		return nil, unsupported("invalid simple_packing parameters: %v", err)
	}
	var unpack *formats.SimpleUnpack
	switch d.encoding {
	case "none":
	case "simple_packing":
		if d.dtypeName != "float64" {
			return nil, unsupported("simple_packing applies to float64 only, not %s", d.dtypeName)
		}
		sp, _ := d.simplePacking()
		unpack = &sp
	default:
		if !known {
			return nil, unsupported("encoding %q is not supported", d.encoding)
		}
	}

	var unshuffle *formats.Unshuffle
	switch d.filter {
	case "none":
	case "shuffle":
		v, ok := d.raw["shuffle_element_size"]
		if !ok {
			return nil, unsupported("shuffle without shuffle_element_size")
		}
		s, err := asUint(v, "shuffle_element_size")
		if err != nil || s == 0 || s > 1<<20 {
			return nil, unsupported("invalid shuffle_element_size %s", describe(v))
		}
		if encoded%s != 0 {
			return nil, unsupported("shuffle element size %d does not divide the %d-byte payload", s, encoded)
		}
		if isBitmask {
			return nil, unsupported("shuffle on a bitmask object")
		}
		unshuffle = &formats.Unshuffle{ElementSize: int(s)}
	default:
		return nil, unsupported("filter %q is not supported", d.filter)
	}

	if _, ok := d.raw["szip_block_offsets"]; ok && d.compression != "szip" {
		return nil, unsupported("szip_block_offsets with compression %q", d.compression)
	}
	switch d.compression {
	case "none":
	case "zstd":
		dec.encoding = formats.Zstd
		dec.codecs = append(dec.codecs, formats.Decompress{Method: formats.MethodZstd, Size: encoded})
	case "lz4":
		dec.encoding = formats.Encoding(d.compression)
		dec.codecs = append(dec.codecs, formats.Decompress{Method: formats.MethodLZ4, Size: encoded})
	case "szip":
		if isBitmask {
			return nil, unsupported("szip on a bitmask object")
		}
		p, err := d.szip(unpack, unshuffle)
		if err != nil {
			return nil, err
		}
		dec.encoding = formats.Encoding(d.compression)
		dec.codecs = append(dec.codecs, formats.Decompress{Method: formats.MethodSzip, Size: encoded, Szip: p})
	case "rle", "roaring":
		if !isBitmask || unpack != nil || unshuffle != nil {
			return nil, unsupported("compression %s applies to unfiltered bitmask objects only", d.compression)
		}
		method, _ := wire.MaskMethod(d.compression)
		dec.encoding = formats.Encoding(d.compression)
		dec.codecs = append(dec.codecs, formats.BitmaskDecode{Method: method, Prefixed: true, Count: d.elements})
	case "blosc2", "zfp", "sz3":
		return nil, unsupported("compression %s is not supported by this build (its payload is in the payload file)", d.compression)
	default:
		return nil, unsupported("compression %q is not supported", d.compression)
	}
	if unshuffle != nil {
		dec.codecs = append(dec.codecs, *unshuffle)
	}
	if unpack != nil {
		dec.codecs = append(dec.codecs, *unpack)
	} else {
		dec.bigEndian = d.bigEndian && d.dt.Swap > 1
	}
	if len(d.masks) > 0 {
		info, _ := d.dt.DType.Info()
		if unpack == nil && info.Kind != formats.KindFloat && info.Kind != formats.KindComplex {
			return nil, unsupported("NaN/Inf masks on a %s object", d.dtypeName)
		}
		dec.masks = &formats.Masks{Count: d.elements}
		for kind, m := range d.masks {
			method, ok := wire.MaskMethod(m.method)
			if !ok {
				return nil, unsupported("mask %s uses method %q, which is not supported", kind, m.method)
			}
			blob := &formats.MaskBlob{Method: method, Region: formats.Region{Offset: o.regionOff + m.offset, Length: m.length}}
			switch kind {
			case "nan":
				dec.masks.NaN = blob
			case "inf+":
				dec.masks.PosInf = blob
			case "inf-":
				dec.masks.NegInf = blob
			}
		}
	}
	return dec, nil
}

// szip reads the szip parameters and works out the bits per sample, which
// the descriptor does not store (docs/formats/tensogram.md,
// "Decoding", compression).
func (d *descriptor) szip(unpack *formats.SimpleUnpack, unshuffle *formats.Unshuffle) (*formats.SzipParams, error) {
	p := &formats.SzipParams{}
	for _, k := range []struct {
		key string
		dst *int
		max uint64
	}{{"szip_rsi", &p.RSI, 4096}, {"szip_block_size", &p.BlockSize, 1 << 16}, {"szip_flags", &p.Flags, 1 << 16}} {
		v, ok := d.raw[k.key]
		if !ok {
			return nil, unsupported("szip without %s", k.key)
		}
		u, err := asUint(v, k.key)
		if err != nil || u > k.max {
			return nil, unsupported("invalid %s %s", k.key, describe(v))
		}
		*k.dst = int(u)
	}
	switch {
	case unpack != nil:
		p.BitsPerSample = unpack.Bits
		p.Flags |= 4 // AEC_DATA_MSB: the packed stream is MSB-first
	case unshuffle != nil:
		p.BitsPerSample = 8
	default:
		p.BitsPerSample = int(d.dt.Width * 8)
	}
	if p.BitsPerSample < 1 || p.BitsPerSample > 32 {
		return nil, unsupported("szip cannot code %d-bit samples", p.BitsPerSample)
	}
	if p.BitsPerSample > 16 && p.BitsPerSample <= 24 {
		p.Flags |= 2 // AEC_DATA_3BYTE, as upstream sets it
	}
	if v, ok := d.raw["szip_block_offsets"]; ok {
		offs, err := asUints(v, "szip_block_offsets")
		if err != nil {
			return nil, unsupported("invalid szip_block_offsets: %v", err)
		}
		p.BlockOffsets = offs
	}
	return p, nil
}

// tensor builds the model's tensor of object i of message m.
func (o *object) tensor(m, i int, name string, base map[string]any) (*formats.Tensor, error) {
	d := o.desc
	t := &formats.Tensor{
		Name:   strconv.Itoa(m) + "/" + name,
		Path:   []string{strconv.Itoa(m), name},
		Shape:  d.shape,
		DType:  d.dt.DType,
		Layout: "dense",
	}
	meta := map[string]any{}
	for k, v := range base {
		if k != "_reserved_" {
			meta[k] = v
		}
	}
	attrs := map[string]any{
		"metadata":   jsonMap(meta),
		"descriptor": jsonMap(d.raw),
		"message":    int64(m),
		"object":     int64(i),
		"frame":      map[string]any{"offset": o.frame.off, "length": o.frame.len},
	}
	if d.byteOrder == "" && d.encoding == "none" && d.dt.Swap > 1 {
		attrs["note"] = "the descriptor has no byte_order; read as little-endian"
	}
	t.Attributes = attrs

	digest := func(c *formats.Component) *formats.Component {
		if o.hashed {
			bodyOff, n := o.frame.body()
			c.Digest = fmt.Sprintf("xxh3:%016x", o.frame.hash)
			c.DigestRegion = &formats.Region{Offset: bodyOff, Length: n}
			c.VerifyByDefault = true
			c.StoredAttributes = map[string]any{"digest_covers": "the whole frame body: payload, masks and descriptor"}
		}
		return c
	}
	t.Components = append(t.Components, digest(&formats.Component{
		Role: "payload", DType: formats.U8, Offset: o.payloadOff, Length: o.payloadLen,
		Encoding: formats.Raw, Size: int64(o.payloadLen),
	}))

	dec, err := o.plan()
	var unsup errUnsupported
	if errors.As(err, &unsup) {
		t.Unsupported = unsup.reason
		attrs["decoded"] = false
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	if d.encoding == "simple_packing" {
		t.DType = formats.F64 // what unpacking gives
	}
	size, err := d.decodedSize()
	if err != nil {
		return nil, err
	}
	data := digest(&formats.Component{
		Role: "data", DType: t.DType, Offset: o.payloadOff, Length: o.payloadLen,
		Encoding: dec.encoding, Codecs: dec.codecs, BigEndian: dec.bigEndian, Masks: dec.masks,
		Size: int64(size),
	})
	if data.StoredAttributes == nil {
		data.StoredAttributes = map[string]any{}
	}
	data.StoredAttributes["pipeline"] = map[string]any{"encoding": d.encoding, "filter": d.filter, "compression": d.compression}
	if len(d.masks) > 0 {
		masks := map[string]any{}
		for kind, m := range d.masks {
			masks[kind] = map[string]any{"method": m.method, "offset": o.regionOff + m.offset, "length": m.length}
		}
		data.StoredAttributes["masks"] = masks
	}
	t.Components = append(t.Components, data)
	for _, kind := range d.maskOrder() {
		m := d.masks[kind]
		method, _ := wire.MaskMethod(m.method) // plan refused the others
		c := digest(&formats.Component{
			Role: "mask_" + kind, DType: formats.Bitmask, Offset: o.regionOff + m.offset, Length: m.length,
			Encoding: formats.Encoding(m.method), Size: int64(d.elements/8 + boolToUint(d.elements%8 != 0)),
			Codecs: []formats.Codec{formats.BitmaskDecode{Method: method, Count: d.elements}},
		})
		t.Components = append(t.Components, c)
	}
	t.Logical = formats.Dense{Role: "data", DType: t.DType}
	return t, nil
}
