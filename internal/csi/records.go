package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// record is what the plugin keeps on disk of a volume it published, so
// that a plugin started again (the same --state-dir) knows which volume is
// at a target and which process serves it. It holds no secret: the source
// is named without its credentials.
type record struct {
	VolumeID string `json:"volume_id"`
	Target   string `json:"target"`
	// Mountpoint is where the server mounted: the target, or a folder
	// of the plugin's bound over the target when the volume was served
	// anew (its first server having died).
	Mountpoint string `json:"mountpoint"`
	Source     string `json:"source"`
	Digest     string `json:"digest"`
	PID        int    `json:"pid,omitempty"`
	LogFile    string `json:"log_file,omitempty"`
	// MetricsSocket is where the server serves its metrics (the plugin's
	// --metrics-addr), if it does: records.metricsSocket(Target).
	MetricsSocket string    `json:"metrics_socket,omitempty"`
	Since         time.Time `json:"published"`
	// Attributes are the volume's own (none of kubelet's, which may hold
	// the pod's service account token), kept when it has no secret (no
	// nodePublishSecretRef, no credentials in its source), so that a
	// plugin started again serves it anew without waiting for kubelet.
	Attributes map[string]string `json:"attributes,omitempty"`
}

// records is the folder of records, one file per target.
type records struct{ dir string }

// key names a target's files: a digest of its path, since kubelet's
// target paths are long.
func key(target string) string {
	sum := sha256.Sum256([]byte(target))
	return hex.EncodeToString(sum[:16])
}

func (r records) path(target string) string {
	return filepath.Join(r.dir, "volumes", key(target)+".json")
}

// logFile is where the server of the volume at target logs.
func (r records) logFile(target string) string {
	return filepath.Join(r.dir, "log", key(target)+".log")
}

// metricsSocket is the unix socket on which the server of the volume at
// target serves its metrics.
func (r records) metricsSocket(target string) string {
	return filepath.Join(r.dir, "metrics", key(target)+".sock")
}

// private is the folder where the server of a volume served anew mounts.
func (r records) private(target string) string {
	return filepath.Join(r.dir, "mnt", key(target))
}

// load returns the record of target, nil if there is none.
func (r records) load(target string) (*record, error) {
	b, err := os.ReadFile(r.path(target))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil || rec.Target != target || !r.sound(&rec) {
		return nil, fmt.Errorf("%s: not a record of %s", r.path(target), target)
	}
	return &rec, nil
}

// sound reports whether rec's paths are the ones the plugin gives its
// target: what unpublish unmounts and removes, and the socket the
// metrics are asked at, are never taken from a file as they are.
func (r records) sound(rec *record) bool {
	return (rec.Mountpoint == rec.Target || rec.Mountpoint == r.private(rec.Target)) &&
		(rec.MetricsSocket == "" || rec.MetricsSocket == r.metricsSocket(rec.Target)) &&
		(rec.LogFile == "" || rec.LogFile == r.logFile(rec.Target))
}

// save replaces the record of rec.Target atomically.
func (r records) save(rec *record) error {
	path := r.path(rec.Target)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// all returns every record in the folder; files that are not records are
// reported through logf and left alone.
func (r records) all(logf func(string, ...any)) []*record {
	paths, _ := filepath.Glob(filepath.Join(r.dir, "volumes", "*.json"))
	var out []*record
	for _, p := range paths {
		b, err := os.ReadFile(p)
		var rec record
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil || rec.Target == "" || r.path(rec.Target) != p || !r.sound(&rec) {
			logf("%s: not a record of a volume; left alone", p)
			continue
		}
		out = append(out, &rec)
	}
	return out
}

// remove deletes the record of target, its server's log and the metrics
// socket a server killed left.
func (r records) remove(target string) error {
	os.Remove(r.logFile(target))
	return r.forget(target)
}

// forget deletes the record of target and the metrics socket a server
// killed left, keeping the server's log.
func (r records) forget(target string) error {
	os.Remove(r.metricsSocket(target))
	if err := os.Remove(r.path(target)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
