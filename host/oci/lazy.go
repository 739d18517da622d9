package oci

import (
	"context"
	"sync"
)

// Lazy is a Client opened on first use (the store and the sources are read
// then, not before): what a command or server that may never meet a
// registry:// module holds. It fetches modules (host/module's
// RegistryFetcher) and answers the oci host capabilities with the same
// client, so both share sources.yml, credentials and the store.
type Lazy struct {
	// Open makes the client; it is called once, by the first use.
	Open func() (*Client, error)

	once   sync.Once
	client *Client
	err    error
}

// Client opens the client on first use and returns it (or the error that
// opening gave, every time).
func (l *Lazy) Client() (*Client, error) {
	l.once.Do(func() { l.client, l.err = l.Open() })
	return l.client, l.err
}

// Fetch is Client.Fetch.
func (l *Lazy) Fetch(ctx context.Context, uri string) ([]byte, string, error) {
	c, err := l.Client()
	if err != nil {
		return nil, "", err
	}
	return c.Fetch(ctx, uri)
}

// ImageDigest is Client.ImageDigest.
func (l *Lazy) ImageDigest(ctx context.Context, image string) (string, error) {
	c, err := l.Client()
	if err != nil {
		return "", err
	}
	return c.ImageDigest(ctx, image)
}

// ImageManifest is Client.ImageManifest.
func (l *Lazy) ImageManifest(ctx context.Context, image string) (string, string, []byte, error) {
	c, err := l.Client()
	if err != nil {
		return "", "", nil, err
	}
	return c.ImageManifest(ctx, image)
}

// ImageManifestAndConfig is Client.ImageManifestAndConfig.
func (l *Lazy) ImageManifestAndConfig(ctx context.Context, image string) ([]byte, string, []byte, error) {
	c, err := l.Client()
	if err != nil {
		return nil, "", nil, err
	}
	return c.ImageManifestAndConfig(ctx, image)
}
