package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

// argName is an argument in a command's Use line: SOURCE, MOUNTPOINT...
var argName = regexp.MustCompile(`^[A-Z]+(\.\.\.)?$`)

// namedArgs checks the arguments against the names in the command's Use
// line, naming the first one missing or the first one too many; a name
// ending in ... takes one or more.
func namedArgs(c *cobra.Command, args []string) error {
	var names []string
	many := false
	for _, tok := range strings.Fields(c.Use)[1:] {
		if argName.MatchString(tok) {
			names = append(names, strings.TrimSuffix(tok, "..."))
			many = many || strings.HasSuffix(tok, "...")
		}
	}
	switch {
	case len(args) < len(names):
		return usageError(c, "missing "+names[len(args)])
	case len(args) > len(names) && !many:
		return usageError(c, fmt.Sprintf("unexpected argument %q", args[len(names)]))
	}
	return nil
}

// usageError is a command-line error naming the command, followed by its
// usage line.
func usageError(c *cobra.Command, msg string) error {
	return withCode(exitUsage, fmt.Errorf("%s: %s\nusage: %s", c.Name(), msg, c.UseLine()))
}
