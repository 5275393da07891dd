package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/llmesh/llmesh/config"
)

// TestKubernetesManifests: every object in deploy/kubernetes decodes
// strictly (an unknown or misplaced field fails) into the published Go
// types of its kind — Kubernetes' own for the core objects, the Gateway API
// Inference Extension's v1 types for the InferencePool —, the mesh in the
// ConfigMap loads, the InferencePool names the Service of the picker, and
// the picker's Deployment arguments parse with llmesh epp's own flags.
// Every object of a kind the extension publishes a CRD for (the
// InferencePool) is also checked against that CRD's OpenAPI v3 schema and
// CEL rules as the API server checks it (crdschema_test.go); an object of
// such a group without a published CRD version fails.
func TestKubernetesManifests(t *testing.T) {
	schemas := loadCRDSchemas(t)
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	kinds := map[string]int{}
	var (
		mesh     string
		eppArgs  []string
		pools    []giev1.InferencePool
		services = map[string]corev1.Service{}
	)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var tm struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			strict := func(into any) {
				t.Helper()
				if err := yaml.UnmarshalStrict(doc, into); err != nil {
					t.Errorf("%s document %d (%s %s): %v", f, i, tm.APIVersion, tm.Kind, err)
				}
			}
			kinds[tm.APIVersion+" "+tm.Kind]++
			if s, ok := schemas[tm.APIVersion+" "+tm.Kind]; ok {
				obj, err := decodeObject(doc)
				if err != nil {
					t.Fatalf("%s document %d: %v", f, i, err)
				}
				for _, e := range s.validate(obj) {
					t.Errorf("%s document %d (%s %s) against the published CRD schema: %s", f, i, tm.APIVersion, tm.Kind, e)
				}
			} else if strings.Contains(tm.APIVersion, "inference.networking") {
				t.Errorf("%s document %d: no published CRD schema for %s %s", f, i, tm.APIVersion, tm.Kind)
			}
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 ServiceAccount":
				strict(&corev1.ServiceAccount{})
			case "v1 ConfigMap":
				var cm corev1.ConfigMap
				strict(&cm)
				mesh = cm.Data["mesh.yaml"]
			case "v1 Service":
				var s corev1.Service
				strict(&s)
				services[s.Name] = s
			case "rbac.authorization.k8s.io/v1 Role":
				strict(&rbacv1.Role{})
			case "rbac.authorization.k8s.io/v1 RoleBinding":
				strict(&rbacv1.RoleBinding{})
			case "apps/v1 Deployment":
				var d appsv1.Deployment
				strict(&d)
				for _, c := range d.Spec.Template.Spec.Containers {
					if len(c.Args) > 0 && c.Args[0] == "epp" {
						eppArgs = c.Args
					}
				}
			case "inference.networking.k8s.io/v1 InferencePool":
				var p giev1.InferencePool
				strict(&p)
				pools = append(pools, p)
			default:
				t.Errorf("%s document %d: unexpected %s %s", f, i, tm.APIVersion, tm.Kind)
			}
		}
	}
	if mesh == "" || eppArgs == nil || len(pools) != 1 {
		t.Fatalf("want the mesh ConfigMap, the epp Deployment and one InferencePool; got %v", kinds)
	}
	if _, err := config.Load([]byte(mesh)); err != nil {
		t.Errorf("the ConfigMap's mesh.yaml: %v", err)
	}
	ref := pools[0].Spec.EndpointPickerRef
	svc, ok := services[string(ref.Name)]
	if !ok {
		t.Fatalf("the InferencePool's endpointPickerRef names %q, not a Service of the manifests", ref.Name)
	}
	found := false
	for _, p := range svc.Spec.Ports {
		if ref.Port != nil && p.Port == int32(ref.Port.Number) {
			found = true
		}
	}
	if !found {
		t.Errorf("endpointPickerRef port %+v is not a port of Service %s", ref.Port, svc.Name)
	}
	// The Deployment's arguments through the real command, with the files
	// it mounts replaced by local ones: whatever fails then (no cluster
	// here) is past flag parsing.
	dir := t.TempDir()
	meshFile := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(meshFile, []byte(mesh), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string(nil), eppArgs...)
	for i := 1; i < len(args); i++ {
		switch args[i-1] {
		case "--config":
			args[i] = meshFile
		case "--listen", "--admin":
			args[i] = "127.0.0.1:0"
		case "--kubeconfig":
			args[i] = filepath.Join(dir, "none")
		}
	}
	args = append(args, "--kubeconfig", filepath.Join(dir, "no-kubeconfig"))
	err = mainErr(args...)
	if err == nil {
		t.Fatal("llmesh epp with the Deployment's arguments ran without a cluster")
	}
	for _, bad := range []string{"unknown flag", "flag needs an argument", "invalid argument"} {
		if strings.Contains(err.Error(), bad) {
			t.Errorf("the Deployment's arguments %q do not parse: %v", eppArgs, err)
		}
	}
}
