package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/internal/redact"
)

func newInspectCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "inspect MODULE",
		Short: "Show a policy module's Kubewarden metadata",
		Long: `Show the Kubewarden metadata embedded in a module (the io.kubewarden.metadata
custom section written by tollgate annotate or kwctl annotate), its digest and size.
With -o json or -o yaml, print the metadata document itself (as kwctl does).`,
		Example: `  tollgate inspect examples/capabilities-drop/policy.wasm
  tollgate inspect builtin://mutating-admission-policy -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			m, err := newResolver().Resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if err := wasmbin.Check(m.Wasm); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			md, err := metadata.Read(m.Wasm)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if output != "" {
				return printData(cmd.OutOrStdout(), output, md)
			}
			return printMetadata(cmd.OutOrStdout(), args[0], wasm.Digest(m.Wasm), len(m.Wasm), md)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: human readable)")
	return cmd
}

func printMetadata(out io.Writer, uri, digest string, size int, md *metadata.Metadata) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Module:\t%s\n", redact.URI(uri))
	fmt.Fprintf(w, "Digest:\t%s\n", digest)
	fmt.Fprintf(w, "Size:\t%d bytes\n", size)
	if md == nil {
		fmt.Fprintf(w, "Metadata:\tnone (the module is not annotated; run tollgate annotate)\n")
		return w.Flush()
	}
	a := md.Annotations
	for _, row := range [][2]string{
		{"Title", a[metadata.AnnotationTitle]},
		{"Description", a[metadata.AnnotationDescription]},
		{"Version", a[metadata.AnnotationVersion]},
		{"Author", a[metadata.AnnotationAuthor]},
		{"URL", a[metadata.AnnotationURL]},
		{"Source", a[metadata.AnnotationSource]},
		{"License", a[metadata.AnnotationLicense]},
	} {
		if row[1] != "" {
			fmt.Fprintf(w, "%s:\t%s\n", row[0], row[1])
		}
	}
	fmt.Fprintf(w, "Protocol version:\t%s\n", md.ProtocolVersion)
	fmt.Fprintf(w, "Execution mode:\t%s\n", md.Mode())
	pt := md.PolicyType
	if pt == "" {
		pt = metadata.PolicyTypeKubernetes
	}
	fmt.Fprintf(w, "Policy type:\t%s\n", pt)
	fmt.Fprintf(w, "Mutating:\t%v\n", md.Mutating)
	fmt.Fprintf(w, "Background audit:\t%v\n", md.BackgroundAuditEnabled())
	if md.ContextAware != nil {
		fmt.Fprintf(w, "Context aware (legacy):\t%v\n", *md.ContextAware)
	}
	if md.MinimumKubewardenVersion != "" {
		fmt.Fprintf(w, "Minimum Kubewarden version:\t%s\n", md.MinimumKubewardenVersion)
	}
	for _, r := range md.ContextAwareResources {
		fmt.Fprintf(w, "Context-aware resource:\t%s %s\n", r.APIVersion, r.Kind)
	}
	for _, c := range md.HostCapabilities {
		fmt.Fprintf(w, "Host capability:\t%s\n", c)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "Rules:\n")
	for _, r := range md.Rules {
		fmt.Fprintf(out, "  - operations %s on %s (apiGroups %s, apiVersions %s)\n",
			strings.Join(r.Operations, ","), strings.Join(r.Resources, ","), quoteList(r.APIGroups), strings.Join(r.APIVersions, ","))
	}
	var other []string
	for _, k := range md.SortedAnnotationKeys() {
		switch k {
		case metadata.AnnotationTitle, metadata.AnnotationDescription, metadata.AnnotationVersion,
			metadata.AnnotationAuthor, metadata.AnnotationURL, metadata.AnnotationSource,
			metadata.AnnotationLicense, metadata.AnnotationUsage:
			continue
		}
		other = append(other, k)
	}
	if len(other) > 0 {
		fmt.Fprintf(out, "Annotations:\n")
		for _, k := range other {
			fmt.Fprintf(out, "  %s: %s\n", k, a[k])
		}
	}
	if u := a[metadata.AnnotationUsage]; u != "" {
		fmt.Fprintf(out, "\nUsage:\n%s\n", u)
	}
	return nil
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ",")
}
