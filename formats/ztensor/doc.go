// Package ztensor reads zTensor containers v0.1, v1.0, v1.1 and v1.2, and,
// through package ztensor2, v2: Open takes a file of any version.
//
// The files say which version they read: v01.go 0.1, v10.go 1.0, v11.go and
// v11fast.go 1.1 and 1.2 (the same layout); object.go, layout.go,
// quantized.go, dtype.go and record.go are the object model those share.
//
// Open parses the index of a file into the format-neutral model of package
// formats without reading any tensor bytes. It rejects structural damage
// (bad magic, a manifest that does not fit, misaligned or out-of-bounds
// components, sizes that contradict the shape) and is lenient about
// vocabulary: an unknown dtype, encoding, logical type or format makes only
// the tensor using it unsupported. It also gives components the decoded
// sizes their layout fixes where the index does not state them (a CSR
// indptr from the rows, quantized components from the convention, one
// sparse stream from the other), and links the sizes that follow from one
// count only decoding tells (formats.SizeLink), for the session to learn.
//
// Container v2 is package ztensor2's; package ztensorwrite writes v1.1 and
// v2 files.
package ztensor
