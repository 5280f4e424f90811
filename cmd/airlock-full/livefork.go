package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// liveForkFlags are `airlock sandbox fork`'s flags of a live fork.
type liveForkFlags struct {
	on    bool
	count int
}

func (f *liveForkFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.on, "live", false, "copy the running sandbox ID, its processes and memory")
	cmd.Flags().IntVarP(&f.count, "count", "n", 1, "with --live: how many copies (1 to 16)")
}

// runLiveFork is `airlock sandbox fork --live ID [NAME]`: it prints the
// clones' ids, one a line.
func runLiveFork(cmd *cobra.Command, args []string, f liveForkFlags, ttl time.Duration, env []string) error {
	if len(env) > 0 {
		return errors.New("--env does not go with --live: a live fork's processes keep the environment they had")
	}
	c, err := client.FromEnv()
	if err != nil {
		return err
	}
	req := client.LiveForkRequest{Count: f.count, TTLSeconds: int64(ttl / time.Second)}
	if len(args) == 2 {
		req.Metadata = map[string]string{"name": args[1]}
	}
	r, err := c.LiveFork(cmd.Context(), args[0], req)
	if err != nil {
		return err
	}
	for _, sb := range r.Sandboxes {
		fmt.Fprintln(cmd.OutOrStdout(), termsafe.Name(sb.ID))
	}
	return nil
}
