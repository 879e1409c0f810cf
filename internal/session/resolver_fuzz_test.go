package session

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// shardFile is a safetensors file holding the u8 tensors names, tensor j
// of file i being the two bytes 16i+j, 16i+j: every tensor's bytes tell
// which file served them.
func shardFile(i int, names []string) []byte {
	m := map[string]any{}
	var data []byte
	for _, name := range names {
		j := int(name[1] - '0')
		m[name] = map[string]any{"dtype": "U8", "shape": []int{2}, "data_offsets": []int{len(data), len(data) + 2}}
		data = append(data, byte(16*i+j), byte(16*i+j))
	}
	h, _ := json.Marshal(m)
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(out, h...), data...)
}

// resolverTargets are what an index entry may name: the folder's four
// shards (present or not), a file that holds no tensors, paths out of the
// folder or into a directory, and nothing.
var resolverTargets = []string{"model-00001.safetensors", "model-00002.safetensors", "model-00003.safetensors",
	"model-00004.safetensors", "config.json", "../model-00001.safetensors", "sub/model-00001.safetensors", ""}

// FuzzFolderResolver builds a folder from the input: up to four shards,
// each present or not and holding some of the tensors t0..t5 (a tensor may
// be in two), a config.json, and a model.safetensors.index.json whose
// weight_map puts each of t0..t7 in one of resolverTargets (or leaves it
// out). It opens the folder and its index file and holds both to an
// oracle of the folder rules: the folder opens exactly when some shard is
// present, no tensor is in two of the files read, and the index names
// only shards that are present, lists some tensor and puts every tensor it
// lists in the file that holds it (opened through its index, only the files it names are
// read, and it must name one). Then the model has exactly the tensors of
// those files, each read from the file that holds it.
func FuzzFolderResolver(f *testing.F) {
	f.Add(uint8(0x3), uint32(0x0201), uint32(0x10))              // two shards, an index that agrees
	f.Add(uint8(0x3), uint32(0x0201), uint32(0x11))              // t1 put in the wrong shard
	f.Add(uint8(0x1), uint32(0x0003), uint32(0x44))              // config.json named
	f.Add(uint8(0x3), uint32(0x0101), uint32(0x0))               // t0 in two shards
	f.Add(uint8(0x2), uint32(0x0200), uint32(0x55))              // a path out of the folder
	f.Add(uint8(0xf), uint32(0x08040201), uint32(0x77773210))    // four shards, t6 and t7 nowhere
	f.Add(uint8(0x0), uint32(0), uint32(0xffffffff))             // no shard
	f.Add(uint8(0x5), uint32(0x00300003), uint32(0x77777222))    // a missing shard named
	f.Add(uint8(0x3), uint32(0x0201), uint32(0x77777700|0x7<<4)) // an index that lists t0 only
	f.Fuzz(func(t *testing.T, present uint8, holds uint32, index uint32) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		// contents[file] lists the tensors of each present shard.
		contents := map[string][]string{}
		for i := 0; i < 4; i++ {
			if present&(1<<i) == 0 {
				continue
			}
			var names []string
			for j := 0; j < 6; j++ {
				if holds>>(8*i)&(1<<j) != 0 {
					names = append(names, fmt.Sprintf("t%d", j))
				}
			}
			name := resolverTargets[i]
			contents[name] = names
			if err := os.WriteFile(filepath.Join(dir, name), shardFile(i, names), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
		weightMap := map[string]string{}
		for j := 0; j < 8; j++ {
			if target := resolverTargets[index>>(4*j)&7]; target != "" && index>>(4*j)&8 == 0 {
				weightMap[fmt.Sprintf("t%d", j)] = target
			}
		}
		ix, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
		indexPath := filepath.Join(dir, "model.safetensors.index.json")
		if err := os.WriteFile(indexPath, ix, 0o644); err != nil {
			t.Fatal(err)
		}
		named := map[string]bool{}
		for _, file := range weightMap {
			named[file] = true
		}
		for _, viaIndex := range []bool{false, true} {
			// The files read: every shard, or those the index names.
			read := map[string]bool{}
			for file := range contents {
				if !viaIndex || named[file] {
					read[file] = true
				}
			}
			owner := map[string]string{}
			why := ""
			for _, file := range slices.Sorted(maps.Keys(read)) {
				for _, name := range contents[file] {
					if other, ok := owner[name]; ok && why == "" {
						why = fmt.Sprintf("tensor %s in %s and %s", name, other, file)
					}
					owner[name] = file
				}
			}
			for _, name := range slices.Sorted(maps.Keys(weightMap)) {
				file := weightMap[name]
				if _, ok := contents[file]; !ok && why == "" {
					why = fmt.Sprintf("the index names %s, which is no shard", file)
				} else if ok && owner[name] != file && why == "" {
					why = fmt.Sprintf("the index puts %s in %s, it is in %q", name, file, owner[name])
				}
			}
			if len(read) == 0 {
				why = "no tensor file"
			}
			if len(weightMap) == 0 {
				why = "an index that lists no tensor"
			}
			path := dir
			if viaIndex {
				path = indexPath
			}
			s, err := Open(path, Options{CacheSize: 1 << 20})
			if (err == nil) != (why == "") {
				t.Fatalf("open %s (via index %v): error %v; the rules say %q\nshards %v\nindex %s", path, viaIndex, err, why, contents, ix)
			}
			if err != nil {
				continue
			}
			if len(s.Container.Tensors) != len(owner) {
				t.Errorf("via index %v: %d tensors, the files read hold %d", viaIndex, len(s.Container.Tensors), len(owner))
			}
			for _, x := range s.Container.Tensors {
				file, ok := owner[x.Name]
				if !ok {
					t.Errorf("via index %v: tensor %q from nowhere", viaIndex, x.Name)
					continue
				}
				i := slices.Index(resolverTargets, file)
				want := []byte{byte(16*i) + x.Name[1] - '0', byte(16*i) + x.Name[1] - '0'}
				got := make([]byte, 2)
				r := s.Pipeline.Component(x, x.Component("data"))
				if n, err := r.ReadAt(got, 0); n != 2 || err != nil || !bytes.Equal(got, want) {
					t.Errorf("via index %v: tensor %q reads %v (%v), want %v from %s", viaIndex, x.Name, got[:n], err, want, file)
				}
			}
			s.Close()
		}
	})
}
