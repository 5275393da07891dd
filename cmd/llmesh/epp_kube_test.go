package main

import "testing"

// The Kubernetes flags: errors name the flag, outside a cluster too.
func TestEPPKubeFlagErrors(t *testing.T) {
	wantUsage(t, mainErr("epp", "--config", "../../epp/testdata/mesh.yaml", "--listen", "127.0.0.1:0", "--namespace", "x"),
		"--namespace and --kubeconfig: only with --inference-pool")
	wantUsage(t, mainErr("epp", "--config", "../../epp/testdata/mesh.yaml", "--listen", "127.0.0.1:0",
		"--inference-pool", "sims", "--kubeconfig", "/nonexistent/kubeconfig"), "--kubeconfig")
}
