package server

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimiter caps the webhook's open connections at --max-connections
// without letting idle keep-alive connections keep a new client out: when a
// connection arrives and every slot is taken, the connection idle the
// longest (HTTP/1 between requests, HTTP/2 with no open stream, as
// http.Server's ConnState reports them) is closed to make room; only when
// none is idle does the newcomer wait (in Accept, its handshake not begun)
// until one closes or goes idle. A client whose idle connection is closed
// opens a new one, as after IdleTimeout.
type connLimiter struct {
	net.Listener
	max int

	mu      sync.Mutex
	conns   map[net.Conn]*connSlot // the served connections, each holding a slot
	changed chan struct{}          // a slot freed or a connection went idle
	closed  chan struct{}
	once    sync.Once
	evicted func() // counts a closed idle connection (metric)
}

type connSlot struct {
	idle  bool
	since time.Time // when it went idle
}

func newConnLimiter(ln net.Listener, max int, evicted func()) *connLimiter {
	return &connLimiter{Listener: ln, max: max, conns: map[net.Conn]*connSlot{}, changed: make(chan struct{}, 1),
		closed: make(chan struct{}), evicted: evicted}
}

// Accept takes the next connection and serves it once it holds a slot.
func (l *connLimiter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		l.mu.Lock()
		if len(l.conns) < l.max {
			l.conns[c] = &connSlot{}
			l.mu.Unlock()
			return c, nil
		}
		var victim net.Conn
		var oldest time.Time
		for vc, s := range l.conns {
			if s.idle && (victim == nil || s.since.Before(oldest)) {
				victim, oldest = vc, s.since
			}
		}
		if victim != nil {
			delete(l.conns, victim) // its slot passes to c now; its close is ignored
			l.conns[c] = &connSlot{}
			l.mu.Unlock()
			go victim.Close()
			if l.evicted != nil {
				l.evicted()
			}
			return c, nil
		}
		l.mu.Unlock()
		select {
		case <-l.changed:
		case <-l.closed:
			c.Close()
			return nil, net.ErrClosed
		}
	}
}

// connState is the webhook http.Server's ConnState hook.
func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	s, ok := l.conns[c]
	if !ok {
		l.mu.Unlock()
		return
	}
	switch st {
	case http.StateIdle:
		s.idle, s.since = true, time.Now()
	case http.StateActive, http.StateNew:
		s.idle = false
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	}
	l.mu.Unlock()
	if st != http.StateActive && st != http.StateNew {
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
}

func (l *connLimiter) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}
