package control

import (
	accesslog "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filelog "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/types/known/structpb"
)

// accessLogPath is where the generated listeners write their access log.
const accessLogPath = "/dev/stdout"

// accessLogFields is the JSON access log format of every generated
// listener: Envoy's view of the request plus the dynamic metadata the llmesh
// filter writes (namespace "llmesh") in OnStreamComplete, which runs before
// access logs. envoy-static.yaml uses the same format; a test keeps the two
// in step.
var accessLogFields = map[string]string{
	"start":         "%START_TIME%",
	"method":        "%REQ(:METHOD)%",
	"path":          "%REQ(:PATH)%",
	"status":        "%RESPONSE_CODE%",
	"grpc_status":   "%GRPC_STATUS_NUMBER%",
	"details":       "%RESPONSE_CODE_DETAILS%",
	"flags":         "%RESPONSE_FLAGS%",
	"duration_ms":   "%DURATION%",
	"upstream":      "%UPSTREAM_CLUSTER%",
	"class":         "%DYNAMIC_METADATA(llmesh:class)%",
	"queue_ms":      "%DYNAMIC_METADATA(llmesh:queue_ms)%",
	"ttft_ms":       "%DYNAMIC_METADATA(llmesh:ttft_ms)%",
	"tpot_ms":       "%DYNAMIC_METADATA(llmesh:tpot_ms)%",
	"decode_steps":  "%DYNAMIC_METADATA(llmesh:decode_steps)%",
	"output_tokens": "%DYNAMIC_METADATA(llmesh:output_tokens)%",
	"preempted":     "%DYNAMIC_METADATA(llmesh:preempted)%",
	"error":         "%DYNAMIC_METADATA(llmesh:error)%",
}

// accessLogs is the HTTP connection manager's access log: one JSON line
// per request on stdout, so the filter's measurements are visible without
// a metrics backend.
func accessLogs() []*accesslog.AccessLog {
	fields := make(map[string]*structpb.Value, len(accessLogFields))
	for k, v := range accessLogFields {
		fields[k] = structpb.NewStringValue(v)
	}
	fl := &filelog.FileAccessLog{
		Path: accessLogPath,
		AccessLogFormat: &filelog.FileAccessLog_LogFormat{LogFormat: &core.SubstitutionFormatString{
			Format: &core.SubstitutionFormatString_JsonFormat{JsonFormat: &structpb.Struct{Fields: fields}},
		}},
	}
	return []*accesslog.AccessLog{{
		Name:       wellknown.FileAccessLog,
		ConfigType: &accesslog.AccessLog_TypedConfig{TypedConfig: mustAny(fl)},
	}}
}
