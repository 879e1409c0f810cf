// Package corrupt holds the corruption corpus: its tests start from small
// valid container files of every format, damage them deterministically
// (truncations at every structural boundary, flipped bits in headers,
// indexes and payloads, lying sizes and offsets) and check that each
// damaged file is either refused at open with an error naming it, or opens
// and then serves every file of its tree either exactly as before or with
// an error confined to the damaged tensors, never with silently wrong bytes
// where the format records a digest, never with a panic, a hang or a large
// allocation.
//
// The package has no code of its own. corpus_test.go runs the variants,
// contract_test.go holds an opened variant to the contract, against the
// snapshot of its valid base (snapshot_test.go); variants_test.go makes
// the kinds of damage every format shares, and <format>_test.go finds a
// format's boundaries, structures and fields. FuzzTree applies the
// contract to arbitrary bytes.
package corrupt
