package server

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/host/config"
)

// TriggerAPI is the reload trigger of content delivered by Options.API.
const TriggerAPI = "configmap"

// APISource delivers the configuration's content from the Kubernetes API (in
// `tollgate serve`: a watch on the policy server's ConfigMap). It runs from
// Start until ctx ends, calls sink.Update with the whole policies.yml content
// whenever it sees it (the initial list, every change, every resync) and
// sink.WatchError for every failed list or watch, which it retries itself.
type APISource func(ctx context.Context, sink APISink)

// APISink receives what an APISource observes.
type APISink interface {
	// Update hands over the newest content; the server reloads from it
	// (trigger "configmap") unless it is the content already serving.
	Update(src []byte)
	// WatchError reports a failed list or watch (counted and logged); the
	// last content delivered keeps serving.
	WatchError(err error)
}

// apiState holds the newest content an APISource delivered. Once there is
// one, it is what every reload reads (file events, SIGHUP and retries
// included): the mounted file is the same ConfigMap as the kubelet saw it,
// up to a minute late, and must never take the server back to older content.
type apiState struct {
	mu      sync.Mutex
	src     []byte
	kick    chan struct{} // capacity 1: updates coalesce to the newest
	updates prometheus.Counter
	errs    prometheus.Counter
}

func newAPIState(reg *prometheus.Registry) *apiState {
	a := &apiState{kick: make(chan struct{}, 1)}
	a.updates = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_config_api_updates_total",
		Help: "Configuration contents delivered by the Kubernetes API watch (--policies-configmap), unchanged ones included.",
	})
	a.errs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_config_api_watch_errors_total",
		Help: "Failed lists and watches of the configuration through the Kubernetes API (--policies-configmap); each is retried, and the last content keeps serving.",
	})
	reg.MustRegister(a.updates, a.errs)
	return a
}

// content returns the newest delivered content, nil before the first one.
func (a *apiState) content() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.src
}

// apiSink is the server's side of its APISource.
type apiSink struct{ s *Server }

func (k apiSink) Update(src []byte) {
	a := k.s.api
	a.updates.Inc()
	if src == nil {
		src = []byte{}
	}
	a.mu.Lock()
	same := a.src != nil && bytes.Equal(a.src, src)
	if !same {
		a.src = bytes.Clone(src)
	}
	a.mu.Unlock()
	if same {
		return
	}
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (k apiSink) WatchError(err error) {
	k.s.api.errs.Inc()
	k.s.log.Warn("configuration watch through the Kubernetes API failed; the last content keeps serving, retrying", "error", err)
}

// reread returns the configuration a reload switches to: the newest content
// the API delivered when there is one, else Options.Reread's (the file).
func (s *Server) reread() (*config.Config, []byte, error) {
	if s.api != nil {
		if src := s.api.content(); src != nil {
			cfg, err := s.o.ParseAPI(src)
			if err != nil {
				return nil, src, err
			}
			return cfg, src, nil
		}
	}
	if s.o.Reread == nil {
		return nil, nil, errors.New("no configuration from the Kubernetes API yet, and no file to read")
	}
	return s.o.Reread()
}

// watchAPI runs Options.API and reloads on each new content it delivers.
func (s *Server) watchAPI(ctx context.Context) {
	actx, cancel := context.WithCancel(ctx)
	s.bg.Add(2)
	go func() {
		defer s.bg.Done()
		defer cancel()
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			case <-s.api.kick:
				_ = s.reloadAsync(ctx, TriggerAPI, false)
			}
		}
	}()
	go func() {
		defer s.bg.Done()
		s.o.API(actx, apiSink{s})
	}()
}
