package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/policytest"
)

// BenchmarkValidateList1000 runs validate natively on a cluster of 1,000 Ingresses (the Wasm
// figure is test/examples' BenchmarkUniqueIngressHostList).
func BenchmarkValidateList1000(b *testing.B) {
	var items []string
	for i := range 1000 {
		ns, name := fmt.Sprintf("list-bench-%d", i%10), fmt.Sprintf("app-%d", i)
		items = append(items, `{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"creationTimestamp":"2026-11-26T10:00:00Z","generation":1,`+
			`"labels":{"app":"`+name+`","team":"`+ns+`"},"name":"`+name+`","namespace":"`+ns+`","resourceVersion":"1","uid":"u"},"spec":{"rules":[{"host":"`+name+"."+ns+`.example.com"}]}}`)
	}
	h := policytest.NewHost(b)
	if err := h.Answer("kubernetes", "list_resources_all", listIngresses, json.RawMessage(`{"kind":"IngressList","items":[`+strings.Join(items, ",")+`]}`)); err != nil {
		b.Fatal(err)
	}
	payload, err := policytest.BuildValidationRequestFromFixture("testdata/ingress-shop-web.json", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r, err := validate(payload); err != nil || !strings.Contains(string(r), `"accepted":true`) {
			b.Fatal(err, string(r))
		}
	}
}
