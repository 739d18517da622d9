package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
)

// Settings configure the policy.
type Settings struct {
	// AllowedRegistries lists the registries images may come from: a host
	// (docker.io, registry.local:5000), optionally followed by a path prefix
	// (ghcr.io/acme allows ghcr.io/acme/... only).
	AllowedRegistries []string `json:"allowedRegistries"`
	// AlwaysPullImages sets imagePullPolicy: Always on every container of an
	// accepted object (a mutation).
	AlwaysPullImages bool `json:"alwaysPullImages"`
}

// parseSettings decodes and checks settings JSON. The error says which
// setting is wrong and why.
func parseSettings(raw []byte) (Settings, error) {
	var s Settings
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return s, fmt.Errorf("setting %s must be %s, not a JSON %s", te.Field, settingType(te.Field), te.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return s, fmt.Errorf("unknown setting %s (known: allowedRegistries, alwaysPullImages)", strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return s, fmt.Errorf("settings are not a JSON object: %v", err)
	}
	if len(s.AllowedRegistries) == 0 {
		return s, errors.New("setting allowedRegistries must list at least one registry, e.g. [\"docker.io\", \"ghcr.io/acme\"]")
	}
	for i, r := range s.AllowedRegistries {
		if err := checkRegistry(r); err != nil {
			return s, fmt.Errorf("setting allowedRegistries[%d] %q: %v", i, r, err)
		}
		s.AllowedRegistries[i] = normalizeRegistry(r)
	}
	return s, nil
}

func settingType(field string) string {
	switch {
	case strings.HasPrefix(field, "allowedRegistries"):
		return "a list of strings"
	case field == "alwaysPullImages":
		return "true or false"
	}
	return "valid"
}

// checkRegistry accepts host[:port][/path] without scheme, tag or digest.
func checkRegistry(r string) error {
	switch {
	case r == "":
		return errors.New("is empty")
	case strings.Contains(r, "://"):
		return errors.New("must not have a scheme: write the host, e.g. ghcr.io")
	case strings.ContainsAny(r, " \t\n@"):
		return errors.New("must be a registry host, optionally with a path, without spaces or a digest")
	case strings.HasPrefix(r, "/") || strings.HasSuffix(r, "/") || strings.Contains(r, "//"):
		return errors.New("has an empty path component")
	}
	host, path, _ := strings.Cut(r, "/")
	if strings.Count(host, ":") > 1 {
		return errors.New("host has more than one port separator")
	}
	if strings.Contains(path, ":") {
		return errors.New("must not have a tag: list registries, not images")
	}
	return nil
}

// normalizeRegistry lower-cases the host and maps Docker Hub's aliases to
// docker.io, as image references are normalized.
func normalizeRegistry(r string) string {
	host, path, hasPath := strings.Cut(r, "/")
	host = strings.ToLower(host)
	if host == "index.docker.io" || host == "registry-1.docker.io" {
		host = "docker.io"
	}
	if !hasPath {
		return host
	}
	return host + "/" + path
}

func validateSettings(payload []byte) ([]byte, error) {
	if _, err := parseSettings(payload); err != nil {
		return kubewarden.RejectSettings(kubewarden.Message(err.Error()))
	}
	return kubewarden.AcceptSettings()
}
