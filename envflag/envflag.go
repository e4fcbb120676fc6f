// Package envflag lets every flag of a command also be set from the environment (SPEC §2):
// --zk-servers reads EJCLOUD_ZK_SERVERS. A flag given on the command line wins.
package envflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Prefix is the environment prefix of ejcloud's commands.
const Prefix = "EJCLOUD_"

// Name returns the variable that sets a flag: "zk-servers" → "EJCLOUD_ZK_SERVERS".
func Name(flagName string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args, then sets each flag not given there from its variable, read through
// getenv (os.Getenv in main; a map in tests). Every bad variable is reported in one error.
//
// A bad flag is only returned: the flag package would print it and then the whole usage, and
// a command reports a start-up error on one line (SPEC §2). --help prints the usage and
// returns flag.ErrHelp. An argument that is not a flag is an error: the commands take none.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		if usage == nil {
			fs.PrintDefaults()
		} else {
			usage()
		}
	}
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		// The flag package stops at the first argument that is not a flag, and every flag
		// after it would be dropped without a word: "--insecure-http false --auth-root x" sets
		// insecure-http and nothing else. None of ejcloud's commands takes an argument.
		return fmt.Errorf("unexpected argument %q: the flags after it were not read (a bool flag takes its value after '=', as --insecure-http=false)", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		if v := getenv(Name(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %v", Name(f.Name), v, err))
			}
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("invalid environment: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Usage installs a usage function that lists every flag with its default and variable.
func Usage(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "%s\n\nFlags (each can also be set by the environment variable shown):\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			def := f.DefValue
			if def == "" {
				def = "none"
			}
			fmt.Fprintf(out, "  --%s (%s)  [default %s]\n      %s\n", f.Name, Name(f.Name), def, f.Usage)
		})
	}
}
