// Package mcfwrite writes MCF files in the byte layout of mantle's pack
// command (or, as an option, of its quantize command) from tensors whose
// stored bytes are given (Write, Marshal), encodes ModelInfo sections
// (EncodeModelInfo), and quantizes float tensors into the q*/k* payloads and
// bare int8/int4 codes mantle writes (Quantize, QuantizeBare).
package mcfwrite
