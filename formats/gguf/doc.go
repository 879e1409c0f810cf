// Package gguf reads GGUF files, the container of llama.cpp and ggml:
// a little-endian header (magic "GGUF", version 2 or 3, tensor and
// key-value counts), typed key-value metadata, tensor infos (name, ne,
// ggml type, offset) and an aligned data section of ggml blocks.
//
// Open parses the header, the metadata and the tensor infos, never a
// tensor byte, and checks every count, length and size against the bytes
// that follow before anything is allocated. docs/formats/gguf.md states the rules.
package gguf
