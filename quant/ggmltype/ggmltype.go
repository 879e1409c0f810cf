// Package ggmltype is the table of ggml's tensor types, as GGUF files and
// zTensor v2 gguf.<type>/1 parts name them: each type's id, name, block
// size and bytes per block. It is what a format reader may know of ggml;
// the dequantization of the blocks is quant/ggml's, which only the
// pipeline calls.
package ggmltype

import (
	"fmt"
	"strings"
)

// Type is a ggml type id, as GGUF tensor infos record it.
type Type uint32

// The ggml type ids (ggml's enum ggml_type). Ids 4, 5 and 31–33, 36–38
// belonged to types ggml has removed.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
	NVFP4   Type = 40
	Q1_0    Type = 41
	Q2_0    Type = 42
)

// Info describes a type's storage.
type Info struct {
	// Name as ggml spells it: "Q4_K", "IQ2_XXS", "BF16".
	Name string
	// BlockSize is the elements per block (1 for plain types).
	BlockSize int
	// TypeSize is the bytes per block.
	TypeSize int
	// Plain marks the types stored as elements (F32, F16, BF16, F64, I8–I64).
	Plain bool
	// NoDequantize says why ggml itself does not dequantize a type ("" when
	// it does).
	NoDequantize string
}

// QK_K is the super-block size of the k-quants and most i-quants.
const QK_K = 256

var infos = map[Type]Info{
	F32:     {Name: "F32", BlockSize: 1, TypeSize: 4, Plain: true},
	F16:     {Name: "F16", BlockSize: 1, TypeSize: 2, Plain: true},
	BF16:    {Name: "BF16", BlockSize: 1, TypeSize: 2, Plain: true},
	F64:     {Name: "F64", BlockSize: 1, TypeSize: 8, Plain: true},
	I8:      {Name: "I8", BlockSize: 1, TypeSize: 1, Plain: true},
	I16:     {Name: "I16", BlockSize: 1, TypeSize: 2, Plain: true},
	I32:     {Name: "I32", BlockSize: 1, TypeSize: 4, Plain: true},
	I64:     {Name: "I64", BlockSize: 1, TypeSize: 8, Plain: true},
	Q4_0:    {Name: "Q4_0", BlockSize: 32, TypeSize: 18},
	Q4_1:    {Name: "Q4_1", BlockSize: 32, TypeSize: 20},
	Q5_0:    {Name: "Q5_0", BlockSize: 32, TypeSize: 22},
	Q5_1:    {Name: "Q5_1", BlockSize: 32, TypeSize: 24},
	Q8_0:    {Name: "Q8_0", BlockSize: 32, TypeSize: 34},
	Q8_1:    {Name: "Q8_1", BlockSize: 32, TypeSize: 36, NoDequantize: "Q8_1 is an activation type: ggml quantizes to it but has no dequantization for it"},
	Q2_K:    {Name: "Q2_K", BlockSize: QK_K, TypeSize: 84},
	Q3_K:    {Name: "Q3_K", BlockSize: QK_K, TypeSize: 110},
	Q4_K:    {Name: "Q4_K", BlockSize: QK_K, TypeSize: 144},
	Q5_K:    {Name: "Q5_K", BlockSize: QK_K, TypeSize: 176},
	Q6_K:    {Name: "Q6_K", BlockSize: QK_K, TypeSize: 210},
	Q8_K:    {Name: "Q8_K", BlockSize: QK_K, TypeSize: 292, NoDequantize: "Q8_K is an intermediate type of ggml's dot products, which it never dequantizes"},
	IQ2_XXS: {Name: "IQ2_XXS", BlockSize: QK_K, TypeSize: 66},
	IQ2_XS:  {Name: "IQ2_XS", BlockSize: QK_K, TypeSize: 74},
	IQ3_XXS: {Name: "IQ3_XXS", BlockSize: QK_K, TypeSize: 98},
	IQ1_S:   {Name: "IQ1_S", BlockSize: QK_K, TypeSize: 50},
	IQ4_NL:  {Name: "IQ4_NL", BlockSize: 32, TypeSize: 18},
	IQ3_S:   {Name: "IQ3_S", BlockSize: QK_K, TypeSize: 110},
	IQ2_S:   {Name: "IQ2_S", BlockSize: QK_K, TypeSize: 82},
	IQ4_XS:  {Name: "IQ4_XS", BlockSize: QK_K, TypeSize: 136},
	IQ1_M:   {Name: "IQ1_M", BlockSize: QK_K, TypeSize: 56},
	TQ1_0:   {Name: "TQ1_0", BlockSize: QK_K, TypeSize: 54},
	TQ2_0:   {Name: "TQ2_0", BlockSize: QK_K, TypeSize: 66},
	MXFP4:   {Name: "MXFP4", BlockSize: 32, TypeSize: 17},
	NVFP4:   {Name: "NVFP4", BlockSize: 64, TypeSize: 36},
	Q1_0:    {Name: "Q1_0", BlockSize: 128, TypeSize: 18},
	Q2_0:    {Name: "Q2_0", BlockSize: 64, TypeSize: 18},
}

// Lookup returns the description of type t, or an error for an id ggml
// does not have (or has removed).
func Lookup(t Type) (Info, error) {
	if info, ok := infos[t]; ok {
		return info, nil
	}
	switch t {
	case 4, 5:
		return Info{}, fmt.Errorf("ggml type %d (Q4_2/Q4_3) was removed from ggml in 2023", t)
	case 31, 32, 33:
		return Info{}, fmt.Errorf("ggml type %d (Q4_0_4_4/Q4_0_4_8/Q4_0_8_8) was removed from ggml: its repacked blocks are made at load time now", t)
	case 36, 37, 38:
		return Info{}, fmt.Errorf("ggml type %d (IQ4_NL_4_4/4_8/8_8) was removed from ggml", t)
	}
	return Info{}, fmt.Errorf("ggml type %d is unknown", t)
}

// ByName returns the type ggml calls name, in any case ("q4_k", "Q4_K").
func ByName(name string) (Type, Info, bool) {
	for t, info := range infos {
		if strings.EqualFold(info.Name, name) {
			return t, info, true
		}
	}
	return 0, Info{}, false
}
