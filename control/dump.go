package control

import (
	"bytes"
	"encoding/json"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
)

// Dump renders resources as stable, indented JSON (protojson per resource,
// grouped by type in LDS, RDS, CDS, EDS order), for `llmesh control
// --dump` and golden files. protojson's own spacing is deliberately
// unstable between runs, so each resource is compacted and re-indented.
func Dump(res Resources) ([]byte, error) {
	var out bytes.Buffer
	out.WriteString("{\n")
	for i, typ := range typeOrder {
		short := typ[strings.LastIndex(typ, ".")+1:]
		out.WriteString("  \"" + short + "\": [")
		for j, r := range res[typ] {
			b, err := protojson.Marshal(r)
			if err != nil {
				return nil, err
			}
			var c bytes.Buffer
			if err := json.Compact(&c, b); err != nil {
				return nil, err
			}
			var ind bytes.Buffer
			if err := json.Indent(&ind, c.Bytes(), "    ", "  "); err != nil {
				return nil, err
			}
			if j > 0 {
				out.WriteString(",")
			}
			out.WriteString("\n    ")
			out.Write(ind.Bytes())
		}
		if len(res[typ]) > 0 {
			out.WriteString("\n  ")
		}
		out.WriteString("]")
		if i < len(typeOrder)-1 {
			out.WriteString(",")
		}
		out.WriteString("\n")
	}
	out.WriteString("}\n")
	return out.Bytes(), nil
}
