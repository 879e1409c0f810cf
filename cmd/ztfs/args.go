package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

// argName is an argument in a command's Use line: SOURCE, MOUNTPOINT...,
// and in brackets an optional one: [GLOB...].
var argName = regexp.MustCompile(`^(\[[A-Z]+(\.\.\.)?\]|[A-Z]+(\.\.\.)?)$`)

// namedArgs checks the arguments against the names in the command's Use
// line, naming the first one missing or the first one too many; a name
// ending in ... takes one or more, and one in brackets may be left out.
func namedArgs(c *cobra.Command, args []string) error {
	var names []string
	required, many := 0, false
	for _, tok := range strings.Fields(c.Use)[1:] {
		if argName.MatchString(tok) {
			optional := strings.HasPrefix(tok, "[")
			tok = strings.Trim(tok, "[]")
			names = append(names, strings.TrimSuffix(tok, "..."))
			many = many || strings.HasSuffix(tok, "...")
			if !optional {
				required = len(names)
			}
		}
	}
	switch {
	case len(args) < required:
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
