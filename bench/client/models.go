package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/llmesh/llmesh/bench/workload"
)

// ServedModel asks an OpenAI-compatible target which model it serves
// (GET /v1/models, the first id), as vLLM's benchmark does when no model is
// given. It returns "" without error for gRPC protocols, whose servers use
// their own model for a request without one.
func ServedModel(ctx context.Context, protocol, target string) (string, error) {
	if protocol != workload.ProtocolCompletions && protocol != workload.ProtocolChat {
		return "", nil
	}
	endpoint, err := openAIURL(protocol, target)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", err
	}
	// The models list sits beside the completion endpoint: …/v1/models.
	if i := strings.LastIndex(u.Path, "/v1/"); i >= 0 {
		u.Path = u.Path[:i] + "/v1/models"
	} else {
		u.Path = "/v1/models"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", u, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", u, err)
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %d", u, res.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", fmt.Errorf("GET %s: %w", u, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("GET %s: no model listed", u)
	}
	return list.Data[0].ID, nil
}
