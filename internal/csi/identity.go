package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identity is the Identity service.
type identity struct {
	csi.UnimplementedIdentityServer
	p *Plugin
}

func (i identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: DriverName, VendorVersion: i.p.cfg.Version}, nil
}

// GetPluginCapabilities lists the Controller service, which the plugin
// serves with no capability of its own (the CSI specification lets a
// plugin omit CONTROLLER_SERVICE only when it serves none of its calls):
// it answers the argument checks of CreateVolume, DeleteVolume and
// ValidateVolumeCapabilities, and with it the conformance suite runs its
// publish lifecycle specs ("Node Service should work", "should be
// idempotent"). Nothing in Kubernetes calls it: the CSIDriver object says
// that no attach is required, and no provisioner is deployed. No
// topology: every node reaches every source it can name.
func (identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}}, nil
}

func (identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
