package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ztfs/ztfs/internal/source"
)

// controller is a Controller service with no capabilities: volumes name
// their source and are neither created nor attached. CreateVolume,
// DeleteVolume and ValidateVolumeCapabilities still answer with their
// argument checks (the conformance suite calls them whatever a plugin
// advertises): a volume's id is its source, named without credentials.
type controller struct {
	csi.UnimplementedControllerServer
	p *Plugin
}

func (controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{}, nil
}

// CreateVolume checks a volume's name, capabilities and parameters (the
// volume attributes) and returns the volume its source names.
func (c controller) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is missing")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	v, err := ParseVolume(req.GetParameters(), c.p.cfg.LocalRoots)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: v.Name(), VolumeContext: req.GetParameters()}}, nil
}

// DeleteVolume deletes nothing: a volume is its source, which ztfs never
// writes.
func (controller) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is missing")
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// ValidateVolumeCapabilities confirms the capabilities of a volume whose
// id names a source this plugin can serve (NotFound otherwise): mount
// volumes of any access mode, served read-only; a block volume is not
// confirmed.
func (c controller) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are missing")
	}
	if err := c.namesSource(id); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s: %v", source.Name(id), err)
	}
	for _, vc := range req.GetVolumeCapabilities() {
		if err := checkCapability(vc); err != nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// namesSource checks that id is a source this plugin could serve: a URL
// of a scheme ztfs reads, or an existing path inside a --local-root.
func (c controller) namesSource(id string) error {
	if err := checkSource(id, c.p.cfg.LocalRoots); err != nil {
		return err
	}
	if source.IsRemote(id) {
		return nil
	}
	if _, err := LocalPath(filepath.Clean(id), c.p.cfg.LocalRoots); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errors.New("no such file or folder")
		}
		return err
	}
	return nil
}

// checkCapabilities checks each capability of a list, which must not be
// empty: InvalidArgument names the first refused.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume_capabilities are missing")
	}
	for _, vc := range caps {
		if err := checkCapability(vc); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
	}
	return nil
}
