package safetensors

// MaxInt4Warnings is maxInt4Warnings, for the tests of package
// safetensors_test.
const MaxInt4Warnings = maxInt4Warnings
