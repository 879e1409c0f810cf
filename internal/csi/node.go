package csi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ztfs/ztfs/internal/mountproc"
	"github.com/ztfs/ztfs/internal/secrets"
)

// node is the Node service: publish and unpublish, no staging.
type node struct {
	csi.UnimplementedNodeServer
	p *Plugin
}

func (n node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.p.cfg.NodeID}, nil
}

// NodeGetCapabilities lists none: no staging, no statistics, no
// expansion; a mount's files belong to no pod's group (they are readable
// by every user).
func (node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NodePublishVolume mounts the volume's source read-only at the target,
// served by a process of its own. The same volume published at the same
// target again is OK, and serves it anew if its server has died; another
// volume on a target that holds one is AlreadyExists.
func (n node) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := checkIDAndTarget(id, target); err != nil {
		return nil, err
	}
	if err := checkCapability(req.GetVolumeCapability()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	attrs := req.GetVolumeContext()
	vol, err := ParseVolume(attrs, n.p.cfg.LocalRoots)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	secret, err := ParseSecrets(req.GetSecrets())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	target = resolveTarget(target)
	unlock, err := n.p.locks.lock(ctx, target)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := n.p.publish(ctx, id, target, vol, attrs, secret); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// publish serves vol at target, the target's lock held; its error is a
// gRPC status.
func (p *Plugin) publish(ctx context.Context, id, target string, vol Volume, attrs map[string]string, secret secrets.Set) error {
	rec := &record{VolumeID: id, Target: target, Mountpoint: target, Source: vol.Name(), Digest: Digest(id, attrs),
		LogFile: p.records.logFile(target), Since: time.Now().UTC()}
	if p.cfg.Metrics {
		rec.MetricsSocket = p.records.metricsSocket(target)
	}
	if secret.Empty() && vol.Name() == vol.Source {
		// Nothing secret: a plugin started again serves the volume
		// anew from its record if its server died.
		rec.Attributes = ownAttributes(attrs)
	}
	st, err := inspectTarget(target)
	if err != nil {
		return status.Errorf(codes.Internal, "%s: reading the mount table: %v", target, err)
	}
	old, err := p.records.load(target)
	if err != nil {
		p.cfg.Logf("%v", err)
	}
	if st.mounted {
		switch {
		case old == nil:
			return status.Errorf(codes.AlreadyExists, "%s: already a mount point (%s) that this plugin did not publish", target, st.fsType)
		case old.VolumeID != id:
			return status.Errorf(codes.AlreadyExists, "%s: volume %s is published there", target, old.VolumeID)
		case old.Digest != rec.Digest:
			return status.Errorf(codes.AlreadyExists, "%s: volume %s is published there with other attributes", target, id)
		case !st.dead:
			return nil
		}
		// The same volume, whose server is gone: kubelet publishes it
		// again (requiresRepublish), and it is served anew. The new
		// server mounts in a folder of the plugin's, bound over the dead
		// mount rather than in its place: the bind propagates to the
		// pods' bind mounts of the target that receive the host's mounts
		// (mountPropagation: HostToContainer), which a new mount in the
		// dead one's place would not reach.
		p.cfg.Logf("%s: the server of volume %s has exited; serving it again", target, id)
		rec.Mountpoint = p.records.private(target)
		if st, err := inspectTarget(rec.Mountpoint); err == nil && st.mounted {
			syscall.Unmount(rec.Mountpoint, syscall.MNT_DETACH)
		}
	} else {
		// Nothing at the target: a record left of an earlier publish
		// is replaced, and the mount it names in the plugin's folder
		// (a volume served anew) must not outlive it.
		p.releasePrivate(old)
	}
	if !vol.Remote() {
		real, err := LocalPath(vol.Source, p.cfg.LocalRoots)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return status.Errorf(codes.NotFound, "volume attribute %q: %s: no such file or folder on the node", attrSource, vol.Source)
		case err != nil:
			return status.Error(codes.InvalidArgument, err.Error())
		}
		vol.Source = real
	}
	for _, dir := range []string{rec.Mountpoint, filepath.Dir(rec.LogFile)} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return status.Errorf(codes.Internal, "%s: %v", target, err)
		}
	}
	// Recorded before the server starts: a plugin killed meanwhile finds
	// the mount its server makes.
	if err := p.records.save(rec); err != nil {
		return status.Errorf(codes.Internal, "%s: recording the volume: %v", target, err)
	}
	fail := func(err error) error {
		// A server killed halfway may have left its mount.
		if st, _ := inspectTarget(rec.Mountpoint); st.mounted {
			syscall.Unmount(rec.Mountpoint, syscall.MNT_DETACH)
		}
		os.Remove(rec.Mountpoint)
		if st.mounted {
			// The dead mount stays, and its record: unpublish removes
			// them.
			p.records.save(old)
		} else {
			// The server's log stays for the error to point at;
			// unpublish removes it.
			p.records.forget(target)
		}
		code := codes.Internal
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			code = codes.DeadlineExceeded
		}
		return status.Errorf(code, "volume %s: %v", id, err)
	}
	pid, err := p.cfg.Starter.Start(ctx, StartRequest{Volume: vol, Target: rec.Mountpoint, Secrets: secret, LogFile: rec.LogFile,
		MetricsSocket: rec.MetricsSocket})
	if err != nil {
		return fail(err)
	}
	rec.PID = pid
	if rec.Mountpoint != target {
		if err := bindReadOnly(rec.Mountpoint, target); err != nil {
			unmountTarget(rec.Mountpoint, pid, false, p.cfg.Logf)
			return fail(fmt.Errorf("binding %s over %s: %w", rec.Mountpoint, target, err))
		}
	}
	if err := p.records.save(rec); err != nil {
		p.cfg.Logf("%s: recording the server's pid: %v", target, err)
	}
	p.cfg.Logf("published volume %s (%s) at %s: server pid %d, log %s", id, vol.Name(), target, pid, rec.LogFile)
	return nil
}

// NodeUnpublishVolume unmounts the target, waits for its server to exit
// and removes the target. A target that is not mounted, or does not
// exist, is OK; a mount whose server died is removed.
func (n node) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := checkIDAndTarget(id, target); err != nil {
		return nil, err
	}
	target = resolveTarget(target)
	unlock, err := n.p.locks.lock(ctx, target)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := n.p.records.load(target)
	if err != nil {
		n.p.cfg.Logf("%v", err)
	}
	if rec != nil && rec.VolumeID != id {
		return nil, status.Errorf(codes.NotFound, "%s: volume %s is published there, not %s", target, rec.VolumeID, id)
	}
	if rec == nil {
		// No record: only a ztfs mount is the plugin's to remove (its
		// record lost); another is someone else's.
		if st, err := inspectTarget(target); err == nil && st.mounted && st.fsType != fuseType {
			return nil, status.Errorf(codes.FailedPrecondition, "%s: a %s mount that this plugin did not publish; left alone", target, st.fsType)
		}
	}
	pid, mountpoint := 0, ""
	if rec != nil {
		mountpoint = rec.Mountpoint
		if serving(rec.PID, mountpoint) {
			pid = rec.PID
		}
	}
	// The target holds the volume's mount, or, once it was served anew,
	// the dead mount and the binds of the servers that came after it.
	// The server is told to let its stuck reads go for a busy bind of its
	// mount as for its mount: the pods' readers hold either.
	mounted, err := unmountAll(target, pid, n.p.cfg.Logf)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s: unmount: %v", target, err)
	}
	if mountpoint != "" && mountpoint != target {
		if _, err := unmountAll(mountpoint, pid, n.p.cfg.Logf); err != nil {
			return nil, status.Errorf(codes.Internal, "%s: unmount: %v", mountpoint, err)
		}
		os.Remove(mountpoint)
	}
	if pid > 0 && !mountproc.WaitExited(pid, mountproc.ExitWait) {
		n.p.cfg.Logf("%s: server pid %d still running %s after the unmount", target, pid, mountproc.ExitWait)
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "%s: removing the target: %v", target, err)
	}
	if err := n.p.records.remove(target); err != nil {
		n.p.cfg.Logf("%s: %v", target, err)
	}
	if mounted || rec != nil {
		n.p.cfg.Logf("unpublished volume %s from %s", id, target)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// checkIDAndTarget checks the arguments publish and unpublish share: a
// volume id, and an absolute target path (InvalidArgument).
func checkIDAndTarget(id, target string) error {
	switch {
	case id == "":
		return status.Error(codes.InvalidArgument, "volume_id is missing")
	case target == "":
		return status.Error(codes.InvalidArgument, "target_path is missing")
	case !filepath.IsAbs(target):
		return status.Errorf(codes.InvalidArgument, "target_path %q is not absolute", target)
	}
	return nil
}
