package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/doctor"
)

func init() { cli.RegisterCommand(newDoctorCmd) }

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report which drivers and isolation layers this host has, and how to fix what it lacks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := doctor.Run(cmd.Context(), doctorDrivers())
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return r.WriteText(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// doctorDrivers makes every driver of the table for doctor to ask.
func doctorDrivers() []doctor.Driver {
	var out []doctor.Driver
	for _, e := range cli.DriverTable {
		d, err := e.New(cli.DriverOptions{})
		out = append(out, doctor.Driver{Name: e.Name, Driver: d, Err: err})
	}
	return out
}
