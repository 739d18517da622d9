package controller

// Names inside a policy server's pod and the controller's CA Secret, which only the controller
// reads. The names of the objects themselves are part of the API (crds/api/v1/names.go).
const (
	// ConfigMountPath, CertMountPath and CacheMountPath are where the Deployment mounts the
	// ConfigMap, the certificate Secret and the compilation cache.
	ConfigMountPath = "/config"
	CertMountPath   = "/pki"
	CacheMountPath  = "/cache"
	// RegistryAuthMountPath is where the imagePullSecret's .dockerconfigjson is mounted.
	RegistryAuthMountPath = "/registry-auth"
	// ContainerName is the policy server container's name.
	ContainerName = "policy-server"
	// CAKey, CAPrivateKey and OldCAKey are the keys of the CA Secret.
	CAKey        = "ca.crt"
	CAPrivateKey = "ca.key"
	OldCAKey     = "old-ca.crt"
)
