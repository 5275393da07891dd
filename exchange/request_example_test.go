package exchange_test

import (
	"fmt"

	"github.com/llmesh/llmesh/exchange"
)

// A host sizes a buffered request body for the scheduler before admission.
func ExampleParseOpenAIRequest() {
	body := []byte(`{"model":"llama-3.1-8b","messages":[{"role":"user","content":"Write a haiku about the sea."}],"stream":true,"max_tokens":64}`)
	req, err := exchange.ParseOpenAIRequest(body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(req.Model, req.Stream, req.OutputLimit(), req.PromptTokens())

	_, err = exchange.ParseOpenAIRequest([]byte(`{"model":"m","max_tokens":1.5}`))
	fmt.Println(err)
	// Output:
	// llama-3.1-8b true 64 8
	// OpenAI request body: json: cannot unmarshal number 1.5 into Go struct field OpenAIRequest.max_tokens of type int
}
