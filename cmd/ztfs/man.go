package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCommand writes the man pages, generated from the command
// definitions so that they never drift from --help, with the sections a
// man page has beyond the flags (manSections).
func newManCommand(root *cobra.Command) *cobra.Command {
	var docDir string
	cmd := &cobra.Command{
		Use:    "man [flags] DIR",
		Short:  "Write the man pages (ztfs.1, ztfs-mount.1, ...) to DIR",
		Args:   cobra.ExactArgs(1),
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return withCode(exitError, err)
			}
			root.DisableAutoGenTag = true
			header := &doc.GenManHeader{Title: "ZTFS", Section: "1", Source: "ztfs " + version, Manual: "ztfs manual"}
			if err := writeManPages(root, header, args[0], docDir); err != nil {
				return withCode(exitError, fmt.Errorf("man pages: %w", err))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&docDir, "doc-dir", "", "where the documentation (README.md, docs/) is installed, for the pages to name")
	return cmd
}

// writeManPages writes the page of c and of each of its commands to dir,
// named as cobra names them (ztfs-mount.1).
func writeManPages(c *cobra.Command, header *doc.GenManHeader, dir, docDir string) error {
	for _, sub := range c.Commands() {
		if !sub.IsAvailableCommand() || sub.IsAdditionalHelpTopicCommand() {
			continue
		}
		if err := writeManPages(sub, header, dir, docDir); err != nil {
			return err
		}
	}
	var page bytes.Buffer
	h := *header
	if err := doc.GenMan(c, &h, &page); err != nil {
		return err
	}
	name := strings.ReplaceAll(c.CommandPath(), " ", "-") + "." + header.Section
	return os.WriteFile(filepath.Join(dir, name), withManSections(page.Bytes(), c, docDir), 0o644)
}

// withManSections inserts the sections manSections gives c before the page's
// SEE ALSO, and ends SEE ALSO with where the documentation is.
func withManSections(page []byte, c *cobra.Command, docDir string) []byte {
	const seeAlso = "\n.SH SEE ALSO\n"
	extra := manSections(c)
	i := bytes.Index(page, []byte(seeAlso))
	if i < 0 {
		page = append(page, seeAlso[1:]...)
		i = len(page) - len(seeAlso)
	}
	var out bytes.Buffer
	out.Write(page[:i+1])
	out.WriteString(extra)
	out.Write(page[i+1:])
	where := "docs/ of the ztfs source"
	if docDir != "" {
		where = docDir + " (docs/ of the ztfs source)"
	}
	out.WriteString(manPara("The full documentation is in " + where + ": README.md (a first look), docs/cli.md (every command, flag and -o key, fstab and systemd, exit codes, remote sources), docs/tree.md (what a mount shows), docs/formats/ (each format), docs/verify.md, docs/limits.md."))
	return out.Bytes()
}

// manSections returns the roff of the sections c's page has beyond what
// cobra makes of its help: every page the exit status; ztfs and ztfs mount
// the mount helper and fstab, the files, and troubleshooting; ztfs status
// the files.
func manSections(c *cobra.Command) string {
	var b strings.Builder
	mount := c.Name() == "mount" || !c.HasParent()
	if mount {
		b.WriteString(manHeading("MOUNT HELPER AND FSTAB"))
		b.WriteString(manPara("mount -t fuse.ztfs, /etc/fstab lines and systemd mount units of Type=fuse.ztfs run ztfs as mount(8)'s helper through the link /sbin/mount.fuse.ztfs, which scripts/install.sh makes (by hand: ln -s \"$(command -v ztfs)\" /sbin/mount.fuse.ztfs). Without it mount(8) runs mount.fuse3, which runs ztfs from the standard PATH. Either way it is ztfs mount, which returns once the mount serves."))
		b.WriteString(manLiteral(
			"# /etc/fstab",
			"/models/llama.zt  /mnt/llama  fuse.ztfs  ro,noauto,x-systemd.automount,cache_size=1GiB  0 0",
			"https://example.org/m/model.safetensors  /mnt/m  fuse.ztfs  ro,_netdev,nofail,cache_dir=/var/cache/ztfs  0 0",
			"",
			"# /etc/systemd/system/mnt-llama.mount",
			"[Mount]",
			"What=/models/llama.zt",
			"Where=/mnt/llama",
			"Type=fuse.ztfs",
			"Options=ro,cache_size=1GiB,allow_other"))
		b.WriteString(manPara("Options: allow_other; ro; rw, which mount(8) passes unless ro is given (the mount is read-only all the same, and says: ztfs: SOURCE is read-only, mounted read-only); mount(8)'s generic options (defaults, nodev, nosuid, noexec, noatime, relatime, auto, noauto, user, users, nouser, _netdev, nofail, x-systemd.*, any x-*); and every flag of ztfs mount as a key, its name with _ for -: " + strings.Join(optionKeyList(), ", ") + "."))
		b.WriteString(manHeading("FILES"))
		b.WriteString(manTagged("/var/log/ztfs/NAME.log (root), $XDG_STATE_HOME/ztfs/NAME.log, else ~/.local/state/ztfs/NAME.log",
			"The log of the background server of the mount at a mountpoint: NAME is the mountpoint with / as -, letters, digits and -._+,@ kept and any other byte as %XX (/mnt/my-model logs to mnt-my-model.log). It says when the mount was made, unmounted and its server exited, and why reads failed. ztfs mount prints its path and ztfs status shows it; $ZTFS_LOG_DIR replaces the folder, --log-file the file. The 100 most recent ztfs logs written in the last 30 days are kept, and those of mounts still mounted."))
	}
	if mount || c.Name() == "status" {
		if !mount {
			b.WriteString(manHeading("FILES"))
		}
		b.WriteString(manTagged("/run/ztfs/NAME.json (root), $XDG_RUNTIME_DIR/ztfs/NAME.json",
			"The state of a mount's server (source, pid, log file, cache use, serving or source changed), which ztfs status reads; $ZTFS_STATE_DIR replaces the folder. Removed when the server exits."))
	}
	if mount {
		b.WriteString(manTagged("/sbin/mount.fuse.ztfs", "The mount helper link (see MOUNT HELPER AND FSTAB)."))
	}
	b.WriteString(manHeading("EXIT STATUS"))
	b.WriteString(manTagged("0", "Success."))
	b.WriteString(manTagged("1", "Bad or damaged input, a failed mount, read or conversion, a digest mismatch."))
	b.WriteString(manTagged("2", "A wrong command line."))
	b.WriteString(manTagged("3", "ztfs unmount of something that is not a ztfs mount."))
	if mount {
		b.WriteString(manHeading("TROUBLESHOOTING"))
		b.WriteString(manPara("Lines starting ztfs: hint: follow an error with what to do."))
		b.WriteString(manTagged("failed to open /dev/fuse: Permission denied", "Check ls -l /dev/fuse; in a container, pass --device /dev/fuse."))
		b.WriteString(manTagged("option allow_other only allowed if 'user_allow_other' is set in /etc/fuse.conf", "Add that line to /etc/fuse.conf, or drop -o allow_other."))
		b.WriteString(manTagged("mount failed: Operation not permitted", "fusermount3 must be setuid root; in a container ztfs needs CAP_SYS_ADMIN."))
		b.WriteString(manTagged("...; the file looks cut off (an interrupted download?)", "The file ends before the data its index describes: download it again."))
		b.WriteString(manTagged("this is one shard of a checkpoint; mount its folder (DIR) for the whole model", "One shard given alone mounts that shard only."))
		b.WriteString(manTagged("Reads fail with EIO", "The server's log (ztfs status names it) says why: the source changed (remount), a digest did not match, or the disk or server under the source failed."))
		b.WriteString(manTagged("Transport endpoint is not connected", "The mount's server died: ztfs unmount MOUNTPOINT removes the dead mount."))
	}
	return b.String()
}

// optionKeyList is the -o keys of ztfs mount, sorted, key=VALUE for those
// that take a value.
func optionKeyList() []string {
	var keys []string
	for k, o := range optionFlags() {
		if o.valued {
			k += "=" + o.value
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// roffText escapes text for roff: backslashes, and hyphens as \- so that
// a command copied from the page keeps ASCII hyphens.
func roffText(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	return strings.ReplaceAll(s, "-", `\-`)
}

// roffLine escapes a line of text; one that would start with a control
// character is guarded.
func roffLine(s string) string {
	s = roffText(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s + "\n"
}

func manHeading(title string) string { return ".SH " + title + "\n" }

func manPara(text string) string { return ".PP\n" + roffLine(text) }

func manTagged(tag, text string) string {
	return ".TP\n\\fB" + roffText(tag) + "\\fR\n" + roffLine(text)
}

func manLiteral(lines ...string) string {
	var b strings.Builder
	b.WriteString(".PP\n.RS\n.nf\n")
	for _, l := range lines {
		b.WriteString(roffLine(l))
	}
	b.WriteString(".fi\n.RE\n")
	return b.String()
}
