package server

import (
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/internal/redact"
)

// redactStatus masks the credentials of module URIs in what GET /policies
// shows (the probe port is plain HTTP and unauthenticated): every module
// URI, and every error text, which may quote a URI (a fetch error, a
// redirect's signed URL) or a configured URI's credentials without it.
// Load errors are masked where they are made (build) already; this is the
// last line, for everything the page shows.
func redactStatus(out *status.Policies) {
	var uris []string
	for _, p := range out.Policies {
		uris = append(uris, p.Module)
		for _, m := range p.Members {
			uris = append(uris, m.Module)
		}
		if sh := p.Shadow; sh != nil {
			uris = append(uris, sh.Module)
			for _, m := range sh.Members {
				uris = append(uris, m.Module)
			}
		}
	}
	out.LastReload.Error = redact.Text(out.LastReload.Error, uris...)
	for i := range out.Policies {
		p := &out.Policies[i]
		p.Module, p.Error = redact.URI(p.Module), redact.Text(p.Error, uris...)
		for j := range p.Members {
			m := &p.Members[j]
			m.Module, m.Error = redact.URI(m.Module), redact.Text(m.Error, uris...)
		}
		if sh := p.Shadow; sh != nil {
			sh.Module, sh.Error = redact.URI(sh.Module), redact.Text(sh.Error, uris...)
			for j := range sh.Members {
				m := &sh.Members[j]
				m.Module, m.Error = redact.URI(m.Module), redact.Text(m.Error, uris...)
			}
		}
	}
}
