package zstdframe

// MinLimitedWindow is minLimitedWindow, for the tests of package
// zstdframe_test.
const MinLimitedWindow = minLimitedWindow
