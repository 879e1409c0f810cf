// Package safetensorswrite writes safetensors files in the official
// writer's byte layout (Write), and packed INT4 KV cache pairs, the ztfs
// convention package safetensors reads (PackInt4KV, Int4KVMetadata). Data is
// streamed: tensors need not fit in memory.
package safetensorswrite
