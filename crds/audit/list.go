package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// maxListRestarts bounds how often one list starts over after its continue token expired.
const maxListRestarts = 5

// item is one listed object: its JSON as the apiserver sent it (with apiVersion and kind, which
// list items lack) and the metadata the audit needs.
type item struct {
	raw       json.RawMessage
	name      string
	namespace string
	uid       string
	rv        string
	labels    map[string]string
}

// lister pages through lists as raw JSON: no unstructured maps are built for objects that are
// only passed on, which keeps a 10,000-Pod audit small.
type lister struct {
	rc       rest.Interface
	pageSize int64
	log      *slog.Logger
}

func listPath(gvr schema.GroupVersionResource, namespace string) string {
	p := "/apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		p = "/api/" + gvr.Version
	}
	if namespace != "" {
		p += "/namespaces/" + namespace
	}
	return p + "/" + gvr.Resource
}

// each calls fn for every object of t in namespace ("" for all, or cluster-scoped), one page at
// a time. A continue token that expired (410 Gone: the apiserver compacted the revision the list
// started at) starts the list over, skipping the objects already seen.
func (l *lister) each(ctx context.Context, t target, namespace string, fn func(item) error) error {
	apiVersion := t.gvr.Version
	if t.gvr.Group != "" {
		apiVersion = t.gvr.Group + "/" + t.gvr.Version
	}
	prefix := []byte(fmt.Sprintf(`{"apiVersion":%q,"kind":%q,`, apiVersion, t.kind))
	// seen: the objects already passed on, so that a list started over does not pass them twice
	seen := map[string]struct{}{}
	cont, restarts := "", 0
	for {
		req := l.rc.Get().AbsPath(listPath(t.gvr, namespace)).Param("limit", strconv.FormatInt(l.pageSize, 10))
		if cont != "" {
			req = req.Param("continue", cont)
		}
		body, err := req.DoRaw(ctx)
		if err != nil {
			var st metav1.Status // the apiserver's reason and message, when it sent them
			if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Message != "" {
				err = &apierrors.StatusError{ErrStatus: st}
			}
			if (apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) && cont != "" && restarts < maxListRestarts {
				restarts++
				l.log.Warn("list page expired (410 Gone): starting the list over", "resource", gvrString(t.gvr), "namespace", namespace, "restart", restarts)
				cont = ""
				continue
			}
			return fmt.Errorf("listing %s%s: %w", gvrString(t.gvr), inNamespace(namespace), err)
		}
		var page struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("listing %s%s: decoding the page: %w", gvrString(t.gvr), inNamespace(namespace), err)
		}
		for _, raw := range page.Items {
			var m struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name            string            `json:"name"`
					Namespace       string            `json:"namespace"`
					UID             string            `json:"uid"`
					ResourceVersion string            `json:"resourceVersion"`
					Labels          map[string]string `json:"labels"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				return fmt.Errorf("listing %s%s: decoding an item: %w", gvrString(t.gvr), inNamespace(namespace), err)
			}
			if _, dup := seen[m.Metadata.UID]; dup {
				continue
			}
			seen[m.Metadata.UID] = struct{}{}
			raw = bytes.TrimSpace(raw)
			if m.Kind == "" && len(raw) > 2 && raw[0] == '{' {
				// list items lack apiVersion and kind; a policy may read them
				full := make([]byte, 0, len(prefix)+len(raw))
				raw = append(append(full, prefix...), raw[1:]...)
			}
			it := item{raw: raw, name: m.Metadata.Name, namespace: m.Metadata.Namespace, uid: m.Metadata.UID, rv: m.Metadata.ResourceVersion, labels: m.Metadata.Labels}
			if err := fn(it); err != nil {
				return err
			}
		}
		if page.Metadata.Continue == "" {
			return nil
		}
		cont = page.Metadata.Continue
	}
}

func inNamespace(ns string) string {
	if ns == "" {
		return ""
	}
	return " in namespace " + ns
}
