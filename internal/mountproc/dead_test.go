package mountproc

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ztfs/ztfs/internal/testenv"
)

// stuckRoot is a file system whose statfs does not answer until release
// is closed: a server that is stopped or stuck.
type stuckRoot struct {
	gofs.Inode
	release chan struct{}
}

func (r *stuckRoot) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	<-r.release
	return 0
}

var _ gofs.NodeStatfser = (*stuckRoot)(nil)

// Dead does not wait on a server that does not answer: it takes it as
// alive after StatfsWait.
func TestDeadDoesNotWaitOnStuckServer(t *testing.T) {
	testenv.RequireFUSE(t)
	dir := t.TempDir()
	root := &stuckRoot{release: make(chan struct{})}
	srv, err := gofs.Mount(dir, root, &gofs.Options{MountOptions: fuse.MountOptions{FsName: "stuck", Name: "ztfs-test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(root.release)
		srv.Unmount()
	}()
	start := time.Now()
	if Dead(dir) {
		t.Error("a server that does not answer was taken for gone")
	}
	if took := time.Since(start); took > StatfsWait+time.Second {
		t.Errorf("Dead took %v, want about %v", took.Round(time.Millisecond), StatfsWait)
	}
	if Dead(os.TempDir()) {
		t.Error("a folder that is no mount was taken for a dead one")
	}
}
