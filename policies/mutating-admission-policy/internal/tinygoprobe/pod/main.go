// Command pod is a TinyGo probe (see package tinygoprobe): a Pod decoded
// into client-go's typed struct as the engine decodes request objects,
// encoded again, and converted to unstructured content by reflection.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"
)

const pod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"app":"web"}},
"spec":{"containers":[{"name":"c","image":"nginx","resources":{"limits":{"cpu":"0.5"}}}]}}`

func main() {
	var p corev1.Pod
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts([]byte(pod), &p); err != nil {
		fail("decode", err)
	}
	b, err := json.Marshal(&p)
	if err != nil {
		fail("encode", err)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
	if err != nil {
		fail("ToUnstructured", err)
	}
	fmt.Println("ok", string(b), len(u))
}

func fail(step string, err error) {
	fmt.Println("FAIL", step+":", err)
	os.Exit(1)
}
