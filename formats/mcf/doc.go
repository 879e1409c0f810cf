// Package mcf reads MCF (Model Container Format) files, the single-file
// model containers of mantle (samcharles93/mantle).
//
// An MCF file is a 40-byte header, sections at 8-aligned offsets (resource
// files such as config.json and tokenizer.json, ModelInfo, TensorData,
// TensorIndex, QuantInfo) and a section directory, written last. Open checks
// every structural rule of docs/formats/mcf.md ("Checks at open") — header,
// directory, section bounds and overlaps, the tensor index, every tensor's
// bounds and size, the quantized tensors' alignment and the QuantInfo records —
// while reading only the header, the directory and the small metadata sections,
// never tensor bytes. It maps the file onto the format-neutral model of package
// formats: plain tensors as one "data" component, q*/k* tensors as their scale
// and code regions with a formats.BlockQuantized logical view, mantle's bare
// int8/int4 embeddings as their codes, and the resource sections as root files
// next to a decoded model_info.json.
//
// Package mcfwrite writes them, as mantle's pack and quantize commands do.
package mcf
