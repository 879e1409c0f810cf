// Package safetensors reads safetensors files.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// UTF-8 JSON describing every tensor, then the data buffer: the tensors'
// bytes, back to back, with nothing else. Open accepts exactly the files the
// official reader (huggingface/safetensors) accepts, except that it also
// rejects repeated tensor names, and it maps them onto the format-neutral
// model of package formats. Package safetensorswrite writes them.
//
// Packed INT4 KV caches (the ztfs convention, marked by the metadata
// int4_packing: u8_lo_first) are mapped onto one quantized_group tensor per
// pair <name>.q4 + <name>.scales; a pair that cannot be combined stays two
// plain tensors, with the reason in their attributes and in the container's
// warnings; safetensorswrite.PackInt4KV writes such pairs.
package safetensors
