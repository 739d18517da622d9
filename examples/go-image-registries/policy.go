package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
)

// RejectedImagesAnnotation is the audit annotation listing rejected images.
const RejectedImagesAnnotation = "image-registries.tollgate.dev/rejected-images"

var logger = kubewarden.NewLogger(slog.LevelInfo)

// podSpecPaths says where the Pod spec sits in each kind the policy checks.
var podSpecPaths = map[string][]string{
	"Pod":                   {"spec"},
	"Deployment":            {"spec", "template", "spec"},
	"ReplicaSet":            {"spec", "template", "spec"},
	"StatefulSet":           {"spec", "template", "spec"},
	"DaemonSet":             {"spec", "template", "spec"},
	"ReplicationController": {"spec", "template", "spec"},
	"Job":                   {"spec", "template", "spec"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template", "spec"},
}

// containerLists are the Pod spec fields that hold containers.
var containerLists = []string{"initContainers", "containers", "ephemeralContainers"}

func validate(payload []byte) ([]byte, error) {
	var rawSettings json.RawMessage
	req, err := kubewarden.ParseValidationRequest(payload, &rawSettings)
	if err != nil {
		return kubewarden.RejectRequest(kubewarden.Message(err.Error()), 400)
	}
	settings, err := parseSettings(rawSettings)
	if err != nil {
		return kubewarden.RejectRequest(kubewarden.Message("invalid settings: "+err.Error()), 400)
	}
	if isNull(req.Object) { // DELETE, or a request without an object
		return kubewarden.AcceptRequest()
	}
	path, ok := podSpecPaths[req.Kind.Kind]
	if !ok {
		return kubewarden.AcceptRequest(kubewarden.WithWarnings(
			fmt.Sprintf("image-registries: kind %s has no Pod spec to check", req.Kind.Kind)))
	}

	var obj map[string]any
	d := json.NewDecoder(bytes.NewReader(req.Object))
	d.UseNumber() // keep integers exact when the object is written back
	if err := d.Decode(&obj); err != nil {
		return kubewarden.RejectRequest(kubewarden.Message("object is not a JSON object: "+err.Error()), 400)
	}
	spec := lookup(obj, path)
	if spec == nil {
		return kubewarden.AcceptRequest()
	}

	var rejected, warnings []string
	var mutated bool
	count := 0
	for _, list := range containerLists {
		containers, _ := spec[list].([]any)
		for _, c := range containers {
			container, ok := c.(map[string]any)
			if !ok {
				continue
			}
			count++
			name, _ := container["name"].(string)
			image, _ := container["image"].(string)
			ref, err := parseImage(image)
			if err != nil {
				rejected = append(rejected, fmt.Sprintf("%s %q: %v", kindOf(list), name, err))
				continue
			}
			if !allowed(ref, settings.AllowedRegistries) {
				rejected = append(rejected, fmt.Sprintf("%s %q: %s", kindOf(list), name, image))
				continue
			}
			if ref.tag == "latest" && ref.digest == "" {
				warnings = append(warnings, fmt.Sprintf("%s %q: image %s uses the latest tag", kindOf(list), name, image))
			}
			if settings.AlwaysPullImages && container["imagePullPolicy"] != "Always" {
				container["imagePullPolicy"] = "Always"
				mutated = true
			}
		}
	}
	logger.Debug("checked images", "uid", req.UID, "kind", req.Kind.Kind, "containers", count, "rejected", len(rejected))

	if len(rejected) > 0 {
		logger.Info("rejected images", "uid", req.UID, "kind", req.Kind.Kind, "name", req.Name, "namespace", req.Namespace, "images", len(rejected))
		msg := fmt.Sprintf("images from registries that are not allowed: %s (allowed: %s)",
			strings.Join(rejected, "; "), strings.Join(settings.AllowedRegistries, ", "))
		return kubewarden.RejectRequest(kubewarden.Message(msg), 403,
			kubewarden.WithAuditAnnotations(map[string]string{RejectedImagesAnnotation: strings.Join(rejected, "; ")}),
			kubewarden.WithWarnings(warnings...))
	}
	if mutated {
		return kubewarden.MutateRequest(obj, kubewarden.WithWarnings(warnings...))
	}
	return kubewarden.AcceptRequest(kubewarden.WithWarnings(warnings...))
}

func kindOf(list string) string {
	return strings.TrimSuffix(list, "s")
}

func lookup(obj map[string]any, path []string) map[string]any {
	cur := obj
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			return nil
		}
		cur = next
	}
	return cur
}

func isNull(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// imageRef is an image reference split the way container runtimes normalize
// it: nginx is docker.io/library/nginx:latest.
type imageRef struct {
	registry   string // docker.io, ghcr.io, localhost:5000
	repository string // library/nginx, acme/web
	tag        string
	digest     string
}

func parseImage(image string) (imageRef, error) {
	var ref imageRef
	if image == "" {
		return ref, fmt.Errorf("no image")
	}
	if strings.ContainsAny(image, " \t\n") || strings.HasPrefix(image, "/") || strings.Contains(image, "://") {
		return ref, fmt.Errorf("image %q is not a valid reference", image)
	}
	name := image
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name, ref.digest = name[:i], name[i+1:]
	}
	// A tag follows the last ':' after the last '/'.
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name, ref.tag = name[:i], name[i+1:]
	}
	if ref.tag == "" && ref.digest == "" {
		ref.tag = "latest"
	}
	first, rest, hasSlash := strings.Cut(name, "/")
	if hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost") {
		ref.registry, ref.repository = normalizeRegistry(first), rest
	} else {
		ref.registry, ref.repository = "docker.io", name
		if !hasSlash {
			ref.repository = "library/" + name
		}
	}
	if ref.repository == "" || strings.HasSuffix(ref.repository, "/") {
		return ref, fmt.Errorf("image %q has no repository", image)
	}
	return ref, nil
}

// allowed reports whether ref is in one of the allowed registries, where an
// entry is a host or a host/path prefix.
func allowed(ref imageRef, registries []string) bool {
	full := ref.registry + "/" + ref.repository
	return slices.ContainsFunc(registries, func(r string) bool {
		return r == ref.registry || strings.HasPrefix(full, r+"/")
	})
}
