package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/ztfs/ztfs/internal/secrets"
	"github.com/ztfs/ztfs/internal/source"
)

// Volume is what a volume's attributes (volumeAttributes of a pod's inline
// volume or of a PersistentVolume) ask of its mount.
type Volume struct {
	// Source is what ztfs mount serves: a path on the node, or an
	// http(s)://, s3:// or hf:// URL, with the revision attribute
	// applied. It may hold a URL's credentials: Name is the form to show.
	Source string
	// CacheSize, ShardSize: 0 leaves ztfs mount's default.
	CacheSize, ShardSize int64
	// NPYDType is "float32", "float16" or "" for the default.
	NPYDType string
	// Verify asks for every digest to be checked (ztfs mount --verify).
	Verify bool
	// AWSEndpointURL and AWSRegion, if not empty, are the S3 endpoint and
	// region of s3:// sources, in place of the node's.
	AWSEndpointURL, AWSRegion string
}

// Name is the volume's source without its credentials.
func (v Volume) Name() string { return source.Name(v.Source) }

// Remote reports whether the volume's source is a URL rather than a path
// on the node.
func (v Volume) Remote() bool { return source.IsRemote(v.Source) }

// Attribute keys of volumeAttributes.
const (
	attrSource         = "source"
	attrRevision       = "revision"
	attrCacheSize      = "cacheSize"
	attrNPYDType       = "npyDtype"
	attrShardSize      = "safetensorsShardSize"
	attrVerify         = "verify"
	attrAWSEndpointURL = "awsEndpointUrl"
	attrAWSRegion      = "awsRegion"
	// kubeletPrefix starts the keys kubelet adds (the pod's name,
	// namespace, uid and service account with podInfoOnMount, and
	// csi.storage.k8s.io/ephemeral for inline volumes).
	kubeletPrefix = "csi.storage.k8s.io/"
)

// attributeKeys are the keys a volume may have besides kubelet's.
var attributeKeys = []string{attrSource, attrRevision, attrCacheSize, attrNPYDType, attrShardSize, attrVerify, attrAWSEndpointURL, attrAWSRegion}

// ParseVolume reads a volume's attributes. localRoots are the folders of
// the node whose files a volume may serve (the plugin's --local-root): a
// source that is a path must resolve to one of them or under it. An
// unknown key or a bad value is an error naming the key; errors never
// quote the source's credentials.
func ParseVolume(attrs map[string]string, localRoots []string) (Volume, error) {
	var v Volume
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !strings.HasPrefix(k, kubeletPrefix) && !contains(attributeKeys, k) {
			return v, fmt.Errorf("volume attribute %q is unknown (known: %s, and kubelet's %s*)", k, strings.Join(attributeKeys, ", "), kubeletPrefix)
		}
	}
	v.Source = attrs[attrSource]
	if strings.TrimSpace(v.Source) == "" {
		return v, fmt.Errorf("volume attribute %q is required: a path on the node, or an http(s)://, s3:// or hf:// URL", attrSource)
	}
	if err := checkSource(v.Source, localRoots); err != nil {
		return v, err
	}
	if rev, ok := attrs[attrRevision]; ok {
		src, err := withRevision(v.Source, rev)
		if err != nil {
			return v, fmt.Errorf("volume attribute %q: %w", attrRevision, err)
		}
		v.Source = src
	}
	var err error
	for key, dst := range map[string]*int64{attrCacheSize: &v.CacheSize, attrShardSize: &v.ShardSize} {
		if s, ok := attrs[key]; ok {
			if *dst, err = ParseSize(s); err != nil {
				return v, fmt.Errorf("volume attribute %q: %w", key, err)
			}
			if *dst == 0 {
				return v, fmt.Errorf("volume attribute %q: %q is not a size above 0", key, s)
			}
		}
	}
	if s, ok := attrs[attrNPYDType]; ok {
		switch s {
		case "float32", "float16":
			v.NPYDType = s
		default:
			return v, fmt.Errorf("volume attribute %q: %q is not float32 or float16", attrNPYDType, s)
		}
	}
	if s, ok := attrs[attrVerify]; ok {
		switch s {
		case "true":
			v.Verify = true
		case "false":
		default:
			return v, fmt.Errorf("volume attribute %q: %q is not true or false", attrVerify, s)
		}
	}
	if s, ok := attrs[attrAWSEndpointURL]; ok {
		if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") || strings.ContainsAny(s, " \t\n\x00") {
			return v, fmt.Errorf("volume attribute %q: %q is not an http:// or https:// URL", attrAWSEndpointURL, source.Redact(s))
		}
		// The attribute is recorded on disk and put in the server's
		// environment: credentials go in the volume's secret instead.
		if u, err := url.Parse(s); err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return v, fmt.Errorf("volume attribute %q: %q is not an endpoint URL (a scheme and a host, no credentials or query: the keys go in the volume's secret)", attrAWSEndpointURL, source.Redact(s))
		}
		v.AWSEndpointURL = s
	}
	if s, ok := attrs[attrAWSRegion]; ok {
		if s == "" || strings.ContainsFunc(s, func(r rune) bool { return !(r == '-' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') }) {
			return v, fmt.Errorf("volume attribute %q: %q is not a region name (e.g. eu-west-1)", attrAWSRegion, s)
		}
		v.AWSRegion = s
	}
	if (v.AWSEndpointURL != "" || v.AWSRegion != "") && !strings.HasPrefix(strings.ToLower(v.Source), "s3://") {
		return v, fmt.Errorf("volume attributes %q and %q are for s3:// sources only", attrAWSEndpointURL, attrAWSRegion)
	}
	return v, nil
}

// checkSource refuses a source ztfs cannot take: an unknown URL scheme, or
// a path that is not absolute or not inside one of localRoots.
func checkSource(src string, localRoots []string) error {
	if source.IsRemote(src) {
		if err := source.Check(src); err != nil {
			return fmt.Errorf("volume attribute %q: %w", attrSource, err)
		}
		return nil
	}
	if strings.Contains(src, "://") {
		return fmt.Errorf("volume attribute %q: %s: unsupported URL scheme (http, https, s3, hf)", attrSource, source.Name(src))
	}
	if !filepath.IsAbs(src) {
		return fmt.Errorf("volume attribute %q: %q is neither an absolute path on the node nor a URL", attrSource, src)
	}
	if len(localRoots) == 0 {
		return fmt.Errorf("volume attribute %q: %s is a path on the node, and this plugin serves none (its --local-root is not set)", attrSource, src)
	}
	return nil
}

// LocalPath checks that the local source src resolves, symbolic links
// followed, inside one of roots, and returns os.ErrNotExist (wrapped) when
// it does not exist.
func LocalPath(src string, roots []string) (string, error) {
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%s: %w", src, os.ErrNotExist)
		}
		return "", fmt.Errorf("%s: %w", src, err)
	}
	for _, root := range roots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(r, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return real, nil
		}
	}
	return "", fmt.Errorf("volume attribute %q: %s is outside the folders this plugin serves (--local-root %s)", attrSource, src, strings.Join(roots, ", "))
}

// withRevision returns the hf:// source src pinned to rev.
func withRevision(src, rev string) (string, error) {
	if !strings.HasPrefix(strings.ToLower(src), "hf://") {
		return "", fmt.Errorf("only hf:// sources have a revision (source is %s)", source.Name(src))
	}
	return source.HFWithRevision(src, rev)
}

// ownAttributes returns the volume's own attributes (attributeKeys)
// without kubelet's, which may hold a secret: the pod's service account
// token (csi.storage.k8s.io/serviceAccount.tokens), when a CSIDriver asks
// for one.
func ownAttributes(attrs map[string]string) map[string]string {
	own := make(map[string]string, len(attributeKeys))
	for _, k := range attributeKeys {
		if v, ok := attrs[k]; ok {
			own[k] = v
		}
	}
	return own
}

// Digest identifies what a volume's attributes ask for (kubelet's own keys
// left out), so that a second publish of a target can tell the same volume
// from another one.
func Digest(volumeID string, attrs map[string]string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q\n", volumeID)
	for _, k := range attributeKeys {
		if v, ok := attrs[k]; ok {
			fmt.Fprintf(h, "%q=%q\n", k, v)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ParseSecrets reads the secrets of nodePublishSecretRef: only the keys of
// internal/secrets are taken, and an error names the key, never a value.
func ParseSecrets(m map[string]string) (secrets.Set, error) {
	var s secrets.Set
	env := make([]string, 0, len(m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !contains(secrets.EnvNames, k) {
			return s, fmt.Errorf("secret key %q is unknown (known: %s)", k, strings.Join(secrets.EnvNames, ", "))
		}
		// A Secret made from a file often ends in a line break; one
		// inside the value would end a header.
		v := strings.TrimRight(m[k], "\r\n")
		if strings.ContainsAny(v, "\r\n\x00") {
			return s, fmt.Errorf("secret %q holds a line break or NUL", k)
		}
		env = append(env, k+"="+v)
	}
	s, _ = secrets.FromEnv(env)
	return s, nil
}

// checkCapability refuses what a ztfs volume cannot be: a block volume, a
// file system type other than ztfs, mount flags other than those a
// read-only FUSE mount has anyway. Every access mode is taken: the mount
// is read-only whatever is asked.
func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return errors.New("volume_capability is missing")
	}
	if c.GetBlock() != nil {
		return errors.New("block volumes are not supported: a ztfs volume is a read-only file system (access_type mount)")
	}
	m := c.GetMount()
	if m == nil {
		return errors.New("volume_capability has no access_type: it must be mount")
	}
	switch m.GetFsType() {
	case "", "ztfs", fuseType:
	default:
		return fmt.Errorf("fs_type %q is not supported: a ztfs volume is fuse.ztfs", m.GetFsType())
	}
	for _, f := range m.GetMountFlags() {
		if !contains(mountFlags, f) {
			return fmt.Errorf("mount flag %q is not supported (known: %s; the mount is always read-only, nosuid, nodev)", f, strings.Join(mountFlags, ", "))
		}
	}
	if c.GetAccessMode() == nil {
		return errors.New("volume_capability has no access_mode")
	}
	return nil
}

// mountFlags are the mount options a PersistentVolume may list: those a
// ztfs mount has, or that change nothing for a read-only file system.
var mountFlags = []string{"ro", "nosuid", "nodev", "noexec", "noatime", "relatime", "nodiratime"}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
