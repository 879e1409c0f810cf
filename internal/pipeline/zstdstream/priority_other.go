//go:build !linux

package zstdstream

// favourThread does nothing where thread priorities are not set
// (priority_linux.go).
func favourThread() (restore func()) { return func() {} }
