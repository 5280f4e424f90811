package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

func newSandboxExportCmd() *cobra.Command {
	var execID string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "export ID:PATH s3://BUCKET/PREFIX/",
		Short: "Store a sandbox's file or directory tree in the daemon's object store",
		Long: `Store a file, or every regular file of a directory tree, of a sandbox in
the object store the daemon's config names ([object_store], [export]
buckets). Each file is streamed; its content type is found from its bytes
(never its name) and must be one the template exports (export_types), and
its size at most the template's export_max. When one file fails, nothing
of the export stays.

A file goes to s3://BUCKET/KEY, or under s3://BUCKET/PREFIX/ with its own
name; a directory's files go under s3://BUCKET/PREFIX/ at their paths below
it. Prints one line per object: its URL, size, content type and SHA-256
(and a download URL when the daemon presigns).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, p, ok := remoteRef(args[0])
			if !ok {
				return errors.New("export: the first argument is ID:PATH, the sandbox and its file or directory")
			}
			if !strings.HasPrefix(args[1], "s3://") {
				return errors.New("export: the second argument is s3://BUCKET/PREFIX/ (or s3://BUCKET/KEY for one file)")
			}
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			r, err := c.Export(cmd.Context(), id, client.ExportRequest{Path: p, To: args[1], Exec: execID})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONTo(cmd.OutOrStdout(), r)
			}
			for _, o := range r.Objects {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%d\t%s\tsha256:%s\n", termsafe.Name(o.Object), o.Size, termsafe.Name(o.ContentType), termsafe.Name(o.SHA256))
				if o.URL != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "  %s\n", termsafe.Name(o.URL))
				}
			}
			for _, s := range r.Skipped {
				fmt.Fprintf(cmd.ErrOrStderr(), "skipped %s: not a regular file\n", termsafe.Name(s))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&execID, "exec", "", "the exec the files come from, named in the objects' metadata and the audit log")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
