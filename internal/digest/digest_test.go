package digest

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestCheck(t *testing.T) {
	data := []byte{0, 0, 0x80, 0x3F, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40} // f32 1, 2, 3, 4
	r := bytes.NewReader(append([]byte("prefix"), data...))
	tests := []struct {
		digest string
		check  func(error) bool
	}{
		{"crc32c:0x9EBA690A", func(err error) bool { return err == nil }},
		{"crc32c:0X9eba690a", func(err error) bool { return err == nil }},
		{"sha256:ad73b9acd6e4a74b2f5bb5386658ce3bb146cd040a1867646ab3b973fb6632b1", func(err error) bool { return err == nil }},
		{"SHA256:AD73B9ACD6E4A74B2F5BB5386658CE3BB146CD040A1867646AB3B973FB6632B1", func(err error) bool { return err == nil }},
		{"crc32c:0xDEADBEEF", func(err error) bool {
			var m *MismatchError
			return errors.As(err, &m) && m.Expected == "0xDEADBEEF" && m.Actual == "0x9EBA690A"
		}},
		{"sha256:00", func(err error) bool { return err != nil && !errors.Is(err, ErrUnverifiable) }},
		{"crc32c:0x12", func(err error) bool { return err != nil && !errors.Is(err, ErrUnverifiable) }},
		{"xxh3:a82f522ec4510db4", func(err error) bool { return err == nil }},
		{"XXH3:A82F522EC4510DB4", func(err error) bool { return err == nil }},
		{"xxh3:0123456789abcdef", func(err error) bool {
			var m *MismatchError
			return errors.As(err, &m) && m.Actual == "a82f522ec4510db4"
		}},
		{"xxh3:0123", func(err error) bool { return err != nil && !errors.Is(err, ErrUnverifiable) }},
		{"md5:abc", func(err error) bool { return errors.Is(err, ErrUnverifiable) }},
	}
	for _, tc := range tests {
		if err := Check(r, 6, int64(len(data)), tc.digest); !tc.check(err) {
			t.Errorf("%s: %v", tc.digest, err)
		}
	}
	if err := Check(r, 6, int64(len(data))+5, "crc32c:0x9EBA690A"); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("region past the end: %v", err)
	}
}
