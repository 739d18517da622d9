package serve

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/tollgate-dev/tollgate/host/server"
)

// serveTLS is the webhook's TLS (nil with --insecure-http): --cert-file and
// --key-file, or a self-signed certificate kept under --state-dir (whose CA
// file is returned, and named on Stderr), reloaded when the files change.
func serveTLS(ctx context.Context, o Options) (*tls.Config, *server.CertReloader, string, error) {
	opts := &o.Config
	if opts.InsecureHTTP {
		return nil, nil, "", nil
	}
	certFile, keyFile, serverCA := opts.CertFile, opts.KeyFile, ""
	if certFile == "" {
		dir := opts.StateDir
		if dir == "" {
			base, err := os.UserConfigDir()
			if err != nil {
				return nil, nil, "", fmt.Errorf("no --cert-file and no --state-dir for a generated certificate: %w", err)
			}
			dir = filepath.Join(base, "tollgate", "serve-tls")
		}
		var names []string
		if ip := net.ParseIP(opts.Addr); ip == nil || !ip.IsUnspecified() {
			names = append(names, opts.Addr)
		}
		if hn, err := os.Hostname(); err == nil {
			names = append(names, hn)
		}
		ss, err := server.EnsureSelfSigned(dir, names...)
		if err != nil {
			return nil, nil, "", err
		}
		certFile, keyFile, serverCA = ss.CertFile, ss.KeyFile, ss.CAFile
		verb := "reusing"
		if ss.Generated {
			verb = "generated"
		}
		w := o.Stderr
		if w == nil {
			w = os.Stderr
		}
		fmt.Fprintf(w, "tollgate: no --cert-file: %s a self-signed certificate; clients must trust its CA:\n  %s\n", verb, ss.CAFile)
	}
	certs, err := server.NewCertReloader(certFile, keyFile, opts.ClientCAFile, o.Logger, nil)
	if err != nil {
		return nil, nil, "", err
	}
	certs.Watch(ctx, 10*time.Second)
	return certs.TLSConfig(), certs, serverCA, nil
}
