package session

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// tinySafetensors is a safetensors file holding one u8 tensor called name.
func tinySafetensors(name string) []byte {
	h, _ := json.Marshal(map[string]any{name: map[string]any{"dtype": "U8", "shape": []int{2}, "data_offsets": []int{0, 2}}})
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(out, h...), 1, 2)
}

// FuzzFolderIndex opens a folder of two shards whose index is the fuzz
// input: never a panic, and a folder that opens agrees with its index.
func FuzzFolderIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":4},"weight_map":{"x":"a.safetensors","y":"b.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"x":"b.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"x":"../a.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"z":"c.safetensors"}}`))
	f.Add([]byte(`{"weight_map":[]}`))
	f.Add([]byte(`  {"weight_map":{"x":"config.json"}}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, index []byte) {
		dir := t.TempDir()
		for name, b := range map[string][]byte{"a.safetensors": tinySafetensors("x"), "b.safetensors": tinySafetensors("y"),
			"config.json": []byte(`{}`), "model.safetensors.index.json": index} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, path := range []string{dir, filepath.Join(dir, "model.safetensors.index.json")} {
			s, err := Open(path, Options{CacheSize: 1 << 20})
			if err != nil {
				continue
			}
			x, err := readIndex(filepath.Join(dir, "model.safetensors.index.json"))
			if err == nil {
				owner := map[string]string{"x": "a.safetensors", "y": "b.safetensors"}
				for tensor, file := range x.WeightMap {
					if owner[tensor] != file {
						t.Errorf("%s opened although its index puts %q in %q", path, tensor, file)
					}
				}
			}
			s.Close()
		}
	})
}
