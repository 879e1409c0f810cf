// Package safetensors reads and writes safetensors files.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// UTF-8 JSON describing every tensor, then the data buffer: the tensors'
// bytes, back to back, with nothing else. Open accepts exactly the files the
// official reader (huggingface/safetensors) accepts, except that it also
// rejects repeated tensor names, and it maps them onto the format-neutral
// model of package formats. Write produces files in the official writer's
// byte layout.
package safetensors
