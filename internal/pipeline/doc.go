// Package pipeline turns the components and tensors of a formats.Container
// into bytes. Each file of the mount is a chain of small readers: file
// region → digest check → decompression → unshuffle, unpack, masks → byte
// swap to little-endian → dtype widening, sparse densification or
// dequantization → .npy header. Decoding stages keep their output in the
// block cache; raw regions are read straight from the source file and can
// be served without a copy.
//
// This package builds the chains (pipeline.go: components, digests,
// tensor.npy; codecs.go: the decoding steps, with the tables that map each
// codec name, formats.Method, to its stage; chain.go, elementwise.go,
// checked.go, values.go: the links that change no block) and learns, for
// the session, the sizes an index leaves unknown (sizes.go: ResolveSizes).
// The links are its parts': package stream (the Reader interface, the
// source region, what every stage shares), blocks (the block cache's front
// and the Source interface of block sources), zstdstream (zstd streams,
// served by frames or decoded from their start, with decode-ahead),
// sequential (lz4 and szip), and dense (sparse densified, quantized
// tensors dequantized).
package pipeline
