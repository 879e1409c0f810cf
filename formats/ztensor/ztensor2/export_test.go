package ztensor2

// What the tests of package ztensor2_test see of the reader's internals.

var (
	CheckShardName  = checkShardName
	CheckDigestText = checkDigestText
)

// MinFileLen is v2MinFileLen.
const MinFileLen = v2MinFileLen
