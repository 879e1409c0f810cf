package ztensor

// What the tests of package ztensor_test see of the reader's internals.

// The limits of the reader.
const (
	MaxDecoded  = maxDecoded
	MaxManifest = maxManifest
)

// The two parsers of a v1.1 manifest, which must agree.
var (
	ParseV11Fast = parseV11Fast
	ParseV11Slow = parseV11Slow
)

// StorageDType is storageDType.
var StorageDType = storageDType

// AttributesOf is what the reader makes of v, a decoded attribute map.
func AttributesOf(v any) (map[string]any, error) { return record{"a": v}.attributes("a") }
