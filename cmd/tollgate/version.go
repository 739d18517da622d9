package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set with -ldflags "-X main.version=..." by release builds.
var version = "dev"

type versionInfo struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	Wazero  string `json:"wazero"`
	WapcGo  string `json:"wapcGo"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of tollgate and its Wasm runtime",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			v := versionInfo{Version: version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, d := range bi.Deps {
					switch d.Path {
					case "github.com/tetratelabs/wazero":
						v.Wazero = d.Version
					case "github.com/wapc/wapc-go":
						v.WapcGo = d.Version
					}
				}
			}
			if output != "" {
				return printData(cmd.OutOrStdout(), output, v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tollgate %s (%s %s/%s, wazero %s, wapc-go %s)\n", v.Version, v.Go, v.OS, v.Arch, v.Wazero, v.WapcGo)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml")
	return cmd
}
