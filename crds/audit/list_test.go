package audit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// TestListRestartsOnGone: a continue token that expired (410 Gone, which a real apiserver gives
// only after etcd compacted the list's revision, minutes later: so an HTTP server speaks the
// apiserver's list protocol here) starts the list over, and the objects already passed on are
// not passed again; the items get their apiVersion and kind back.
func TestListRestartsOnGone(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.URL.Path != "/api/v1/namespaces/shop/pods" || r.URL.Query().Get("limit") != "2" {
			http.Error(w, "unexpected "+r.URL.String(), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		item := func(i int) string {
			return fmt.Sprintf(`{"metadata":{"name":"p%d","namespace":"shop","uid":"u%d","labels":{"i":"%d"}},"spec":{}}`, i, i, i)
		}
		switch {
		case n == 1: // first page
			fmt.Fprintf(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"continue":"c1"},"items":[%s,%s]}`, item(1), item(2))
		case n == 2 && r.URL.Query().Get("continue") == "c1": // expired
			w.WriteHeader(http.StatusGone)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"The provided continue parameter is too old","reason":"Expired","code":410}`)
		case n == 3 && r.URL.Query().Get("continue") == "": // the list again, one more object now
			fmt.Fprintf(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"continue":"c2"},"items":[%s,%s]}`, item(1), item(2))
		case n == 4 && r.URL.Query().Get("continue") == "c2":
			fmt.Fprintf(w, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[%s]}`, item(3))
		default:
			http.Error(w, fmt.Sprintf("call %d: %s", n, r.URL), 400)
		}
	}))
	defer srv.Close()
	rc, err := rawClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	l := &lister{rc: rc, pageSize: 2, log: slog.New(slog.NewTextHandler(&logs, nil))}
	var got []string
	err = l.each(context.Background(), target{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, kind: "Pod", namespaced: true}, "shop", func(it item) error {
		got = append(got, it.name)
		if !strings.HasPrefix(string(it.raw), `{"apiVersion":"v1","kind":"Pod","metadata"`) || it.uid == "" || it.labels["i"] == "" {
			t.Errorf("item %s", it.raw)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "p1,p2,p3" || calls.Load() != 4 {
		t.Errorf("passed on %v in %d calls, want p1,p2,p3 once each in 4", got, calls.Load())
	}
	if !strings.Contains(logs.String(), "410 Gone") {
		t.Errorf("the restart was not logged: %s", logs.String())
	}
}

// TestListOtherErrorsFail: any other error ends the list, naming the resource and namespace.
func TestListOtherErrorsFail(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods is forbidden","reason":"Forbidden","code":403}`)
	}))
	defer srv.Close()
	rc, _ := rawClient(&rest.Config{Host: srv.URL})
	l := &lister{rc: rc, pageSize: 10, log: slog.New(slog.DiscardHandler)}
	err := l.each(context.Background(), target{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, kind: "Deployment", namespaced: true}, "shop", func(item) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "apps/v1/deployments in namespace shop") || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("err = %v", err)
	}
}
