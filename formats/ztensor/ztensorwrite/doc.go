// Package ztensorwrite writes zTensor files.
//
// Writer (v11.go) writes v1.1 files as the reference writer lays them out,
// streaming every component so that tensors of any size pass through in
// constant memory, except that zstd components are independent 128 KiB
// frames with a seek table unless a component asks for a single frame (what
// the reference writes), so that readers can decode any part on its own.
//
// V2Writer (v2.go) writes the canonical form of container v2, and checks its
// manifest with the reader's rules (ztensor2.CheckManifest) before writing
// it. Encoder (cborenc.go) is the deterministic CBOR of both manifests.
package ztensorwrite
