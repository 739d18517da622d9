// Command wasi-big is a test fixture in the WASI execution mode: a large
// standard-Go policy (about 20 MB of Wasm, the size of Kubewarden's
// cel-policy) to measure how long a module that size takes to compile and to
// load again from the compilation cache. It links a scheme of the core,
// apps, batch, networking and rbac kinds (k8s.io/api, apimachinery) and
// decodes the request's object into its typed form with it; it accepts an
// object the scheme decodes and rejects one it does not.
package main

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/tollgate-dev/tollgate/sdk/wasi"
)

func main() {
	wasi.Main(wasi.Policy{Validate: validate, ValidateSettings: func([]byte) ([]byte, error) { return wasi.SettingsValid() }})
}

var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, networkingv1.AddToScheme, rbacv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(s)
}()

func validate(payload []byte) ([]byte, error) {
	var in struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, err
	}
	obj, gvk, err := codecs.UniversalDeserializer().Decode(in.Request.Object, nil, nil)
	if err != nil {
		return wasi.Reject(fmt.Sprintf("the object does not decode: %v", err), 400)
	}
	if _, err := json.Marshal(obj); err != nil {
		return wasi.Reject(fmt.Sprintf("%s does not encode: %v", gvk, err), 400)
	}
	return wasi.Accept()
}
