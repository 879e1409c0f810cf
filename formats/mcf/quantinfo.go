package mcf

import (
	"errors"
	"fmt"
	"math"

	"github.com/ztfs/ztfs/quant/mcflayout"
)

// Quantization domains of a QuantInfo record.
const (
	DomainWeights     uint8 = 0
	DomainActivations uint8 = 1
)

// quantRecord is one QuantInfo record (docs/formats/mcf.md, "QuantInfo").
type quantRecord struct {
	index                int // position in the QuantInfo section
	tensor               uint32
	method, domain       uint8
	blockSize, superSize uint16
	minClip, maxClip     float32
}

// quantInfo is the parsed QuantInfo section; sec is nil when the file has
// none.
type quantInfo struct {
	sec            *section
	version, count uint32
	records        []*quantRecord
	warnings       []string
}

// readQuantInfo reads and checks the QuantInfo section (docs/formats/mcf.md,
// "QuantInfo": mantle's reader's checks) and attaches each record to its tensor.
func readQuantInfo(f *file, s *section, x *index) (*quantInfo, error) {
	qi := &quantInfo{sec: s}
	if s == nil {
		return qi, nil
	}
	if s.size == 0 {
		return nil, errors.New("QuantInfo: the section is empty")
	}
	if s.size < quantHeaderSize {
		return nil, fmt.Errorf("QuantInfo: the section is %d bytes, shorter than its %d-byte header", s.size, quantHeaderSize)
	}
	hb, err := f.read(s.off, quantHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("QuantInfo: %w", err)
	}
	qi.version, qi.count = le.Uint32(hb), le.Uint32(hb[4:])
	if qi.version != 1 {
		return nil, fmt.Errorf("QuantInfo: unsupported QuantInfo version %d", qi.version)
	}
	need := quantHeaderSize + uint64(qi.count)*quantRecordSize
	if need > s.size {
		return nil, fmt.Errorf("QuantInfo: %d records need %d bytes, but the section has %d", qi.count, need, s.size)
	}
	raw, err := f.read(s.off+quantHeaderSize, need-quantHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("QuantInfo: %w", err)
	}
	qi.records = make([]*quantRecord, qi.count)
	for i := range qi.records {
		b := raw[i*quantRecordSize:]
		r := &quantRecord{
			index:     i,
			tensor:    le.Uint32(b),
			method:    b[4],
			domain:    b[5],
			blockSize: le.Uint16(b[6:]),
			superSize: le.Uint16(b[8:]),
			minClip:   math.Float32frombits(le.Uint32(b[16:])),
			maxClip:   math.Float32frombits(le.Uint32(b[20:])),
		}
		for _, c := range b[10:16] {
			if c != 0 {
				return nil, fmt.Errorf("QuantInfo: record %d reserved bytes are not zero", i)
			}
		}
		if err := r.check(); err != nil {
			return nil, err
		}
		if r.tensor >= x.count {
			return nil, fmt.Errorf("QuantInfo: record %d refers to tensor index %d, but the TensorIndex has %d entries", i, r.tensor, x.count)
		}
		e := x.entries[r.tensor]
		if uint16(r.method) != e.code {
			return nil, fmt.Errorf("QuantInfo: record %d method %s does not match tensor %q dtype %s",
				i, dtypeLabel(uint32(r.method)), e.name, e.info.name)
		}
		if e.record != nil {
			qi.warnings = append(qi.warnings, fmt.Sprintf("QuantInfo: records %d and %d both describe tensor %q; record %d is shown",
				e.record.index, i, e.name, e.record.index))
		} else {
			e.record = r
		}
		qi.records[i] = r
	}
	return qi, nil
}

// check applies the per-method rules of mantle's reader.
func (r *quantRecord) check() error {
	i := r.index
	if r.domain != DomainWeights && r.domain != DomainActivations {
		return fmt.Errorf("QuantInfo: record %d has unknown domain %d", i, r.domain)
	}
	info, ok := dtypeTable[uint16(r.method)]
	if !ok || info.family == FamilyPlain {
		return fmt.Errorf("QuantInfo: record %d has unknown method %d", i, r.method)
	}
	var block, super uint16
	switch info.family {
	case FamilyQ:
		block = mcflayout.BlockSize
	case FamilyK:
		block, super = mcflayout.BlockSize, mcflayout.BlockSize*mcflayout.SuperBlocks
	}
	if info.family != FamilyInt && r.domain != DomainWeights {
		return fmt.Errorf("QuantInfo: record %d: method %s requires the weights domain (0), not %d", i, info.name, r.domain)
	}
	if r.blockSize != block {
		return fmt.Errorf("QuantInfo: record %d has block size %d (%s requires %d)", i, r.blockSize, info.name, block)
	}
	if r.superSize != super {
		return fmt.Errorf("QuantInfo: record %d has super-block size %d (%s requires %d)", i, r.superSize, info.name, super)
	}
	return nil
}

// domainName names a domain in the manifest.
func domainName(d uint8) string {
	if d == DomainActivations {
		return "activations"
	}
	return "weights"
}
