package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdSchema is one served version of a published CRD, compiled as the API
// server compiles it: the structural schema (defaults, pruning, CEL rules)
// and the OpenAPI v3 validator.
type crdSchema struct {
	structural *structuralschema.Structural
	openapi    validation.SchemaValidator
	cel        *cel.Validator // nil when the version has no x-kubernetes-validations
}

// validate checks one object as the API server checks a create: defaults
// applied, fields the schema does not know reported (the server would prune
// them, or refuse them with strict field validation), then the OpenAPI
// schema (types, required fields, enums, formats, bounds) and the CEL rules.
// It returns every problem, each naming its field path.
func (s *crdSchema) validate(obj map[string]any) []string {
	structuraldefaulting.Default(obj, s.structural)
	var errs []string
	for _, p := range pruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		errs = append(errs, fmt.Sprintf("%s: unknown field", p))
	}
	list := validation.ValidateCustomResource(nil, obj, s.openapi)
	if s.cel != nil {
		celErrs, _ := s.cel.Validate(context.Background(), nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		list = append(list, celErrs...)
	}
	for _, e := range list {
		errs = append(errs, e.Error())
	}
	return errs
}

// loadCRDSchemas reads the CRDs the Gateway API Inference Extension
// publishes in its module (config/crd/bases of the version go.mod requires)
// and compiles every served version, keyed by "group/version Kind".
func loadCRDSchemas(t *testing.T) map[string]*crdSchema {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		t.Fatalf("locating the inference extension's module: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs under %s: %v", dir, err)
	}
	schemas := map[string]*crdSchema{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := compileCRD(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for k, v := range m {
			schemas[k] = v
		}
	}
	return schemas
}

// compileCRD compiles every served version of one CRD document.
func compileCRD(b []byte) (map[string]*crdSchema, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		return nil, err
	}
	out := map[string]*crdSchema{}
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return nil, fmt.Errorf("version %s: no openAPIV3Schema", v.Name)
		}
		var internal apiextensions.CustomResourceValidation
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, &internal, nil); err != nil {
			return nil, fmt.Errorf("version %s: %w", v.Name, err)
		}
		ss, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("version %s: not a structural schema: %w", v.Name, err)
		}
		if errs := structuralschema.ValidateStructural(field.NewPath("openAPIV3Schema"), ss); len(errs) > 0 {
			return nil, fmt.Errorf("version %s: not a structural schema: %w", v.Name, errs.ToAggregate())
		}
		sv, _, err := validation.NewSchemaValidator(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("version %s: %w", v.Name, err)
		}
		out[crd.Spec.Group+"/"+v.Name+" "+crd.Spec.Names.Kind] = &crdSchema{
			structural: ss,
			openapi:    sv,
			cel:        cel.NewValidator(ss, true, celconfig.PerCallLimit),
		}
	}
	return out, nil
}

// decodeObject decodes a YAML manifest as the API server decodes a JSON
// body: integral numbers as int64, the others as float64 (what the CEL rules
// and the integer types of the schema expect).
func decodeObject(doc []byte) (map[string]any, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// TestCRDSchemaRejects: the schema check is not vacuous — an InferencePool
// with a wrong field type, one without a required field, an enum outside
// its values, a broken CEL rule and an unknown field are each refused, with
// the field named; the manifest's own pool passes.
func TestCRDSchemaRejects(t *testing.T) {
	schemas := loadCRDSchemas(t)
	s := schemas["inference.networking.k8s.io/v1 InferencePool"]
	if s == nil {
		t.Fatalf("no v1 InferencePool schema among %d", len(schemas))
	}
	const good = `
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: sims}
spec:
  selector: {matchLabels: {app: sim}}
  targetPorts: [{number: 8000}]
  endpointPickerRef: {kind: Service, name: llmesh-epp, port: {number: 9002}, failureMode: FailClose}
`
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"valid", "", "", ""},
		{"port number a string", "number: 8000", `number: "8000"`, "spec.targetPorts[0].number: Invalid value: \"string\""},
		{"required targetPorts missing", "  targetPorts: [{number: 8000}]\n", "", "spec.targetPorts: Required value"},
		{"required endpointPickerRef.name missing", "name: llmesh-epp, ", "", "spec.endpointPickerRef.name: Required value"},
		{"port out of range", "number: 8000", "number: 70000", "spec.targetPorts[0].number: Invalid value: 70000"},
		{"failureMode not in the enum", "FailClose", "FailSometimes", "spec.endpointPickerRef.failureMode: Unsupported value"},
		{"Service without a port (CEL rule)", ", port: {number: 9002}", "", "spec.endpointPickerRef: Invalid value"},
		{"duplicate target ports (CEL rule)", "[{number: 8000}]", "[{number: 8000}, {number: 8000}]", "spec.targetPorts: Invalid value"},
		{"unknown field", "  targetPorts:", "  replicas: 2\n  targetPorts:", "spec.replicas: unknown field"},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := good
			if c.old != "" {
				if !strings.Contains(doc, c.old) {
					t.Fatalf("%q not in the pool", c.old)
				}
				doc = strings.Replace(doc, c.old, c.new, 1)
			}
			obj, err := decodeObject([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			errs := s.validate(obj)
			if c.want == "" {
				if len(errs) > 0 {
					t.Fatalf("valid pool refused: %q", errs)
				}
				return
			}
			for _, e := range errs {
				if strings.Contains(e, c.want) {
					return
				}
			}
			t.Errorf("want an error containing %q, got %q", c.want, errs)
		})
	}
}
