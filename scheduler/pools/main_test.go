package pools_test

import (
	"testing"

	"go.uber.org/goleak"
)

// zmq4's PUB socket leaves its writer goroutine waiting after Close (the
// publishers of kvevents_test.go): a leak of the library, not of pools.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
