package mcf

// What the tests of package mcf_test see of the reader's internals.

// MaxModelInfo is maxModelInfo.
const MaxModelInfo = maxModelInfo

// JSONText is jsonText.
func (mi *ModelInfo) JSONText() ([]byte, error) { return mi.jsonText() }
