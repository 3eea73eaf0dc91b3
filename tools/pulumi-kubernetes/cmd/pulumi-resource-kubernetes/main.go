// Command pulumi-resource-kubernetes serves the pinned Pulumi Kubernetes provider.
//
// It is upstream's main without its `go generate` step: the provider needs its package schema with the
// plugin version written into it, so that is done here at start-up from the schema.json shipped with the
// provider module. tools/build.sh places schema.json and terraform-mapping.json next to this file in a
// scratch copy of the module before building; they are never committed.
package main

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema.json
var schemaJSON []byte

//go:embed terraform-mapping.json
var terraformMapping []byte

// versionedSchema returns the schema with its top-level "version" set to v, leaving every other key as is.
func versionedSchema(raw []byte, v string) ([]byte, error) {
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("embedded schema.json is not a JSON object: %w", err)
	}
	quoted, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	spec["version"] = quoted
	return json.Marshal(spec)
}

func main() {
	if version.Version == "" {
		fmt.Fprintln(os.Stderr, "pulumi-resource-kubernetes: built without a version (-X .../pkg/version.Version)")
		os.Exit(1)
	}
	schema, err := versionedSchema(schemaJSON, version.Version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-resource-kubernetes:", err)
		os.Exit(1)
	}
	provider.Serve("kubernetes", version.Version, schema, terraformMapping)
}
