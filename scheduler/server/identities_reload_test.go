package server_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/scheduler/server/identity"
	"github.com/llmesh/llmesh/testkit/proctest"
)

const reloadIdentitiesV1 = `identities:
  - name: keep
    token_files: [keep.token]
    classes: [default]
  - name: gone
    token_files: [gone.token]
  - name: rot
    token_files: [rot.token]
`

// keep may now use premium only; gone is removed; rot is as it was.
const reloadIdentitiesV2 = `identities:
  - name: keep
    token_files: [keep.token]
    classes: [premium]
  - name: rot
    token_files: [rot.token]
`

// ReplaceIdentities (a reloaded identities file): a session whose
// identity was removed is closed (its waiting request rejected with why,
// its slot freed), one whose identity changed is held to the new entry,
// and a session whose token no longer proves its identity is closed when
// the same identities are put in place again (a reload forced by SIGHUP).
// cmd/llmesh/schedserve tests the file's watcher and hangup around it.
func TestIdentitiesReload(t *testing.T) {
	for _, tr := range []string{client.TransportFramed, client.TransportGRPC} {
		t.Run(tr, func(t *testing.T) {
			dir := t.TempDir()
			for name, tok := range map[string]string{"keep.token": "keep-token", "gone.token": "gone-token", "rot.token": "rot-old"} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(tok+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, "identities.yaml")
			load := func(src string) *identity.Set {
				t.Helper()
				if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
					t.Fatal(err)
				}
				set, err := identity.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				return set
			}
			admin, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var log proctest.Buffer
			proctest.ShowOnFailure(t, "service log", &log)
			svc, addr := startService(t, strings.Replace(twoClassMesh, "max_inflight: 4", "max_inflight: 3", 1),
				server.Options{Identities: load(reloadIdentitiesV1), Registry: metricsOn(t, admin), Log: &log})
			metricsURL := "http://" + admin.Addr().String() + "/metrics"

			keep := identityClient(t, addr, tr, client.Options{Token: "keep-token"})
			gone := identityClient(t, addr, tr, client.Options{Token: "gone-token"})
			rot := identityClient(t, addr, tr, client.Options{Token: "rot-old"})
			var held []scheduler.Lease
			for name, c := range map[string]*client.Client{"keep": keep, "gone": gone, "rot": rot} {
				l, err := admitClass(c, "default")
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				held = append(held, l)
			}
			defer func() {
				for _, l := range held {
					l.Release(scheduler.Done)
				}
			}()
			// The pool is full: gone's next request waits.
			waiting := make(chan error, 1)
			go func() {
				l, err := admitClass(gone, "premium")
				if err == nil {
					l.Release(scheduler.Done)
				}
				waiting <- err
			}()
			waitMetric(t, metricsURL, `llmesh_scheduler_queued{class="premium",pool="gpu"} 1`)

			if closed, err := svc.ReplaceIdentities(load(reloadIdentitiesV2)); closed != 1 || err != nil {
				t.Fatalf("ReplaceIdentities: %d session(s) closed, %v; want 1", closed, err)
			}
			if err := <-waiting; !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), "identity gone") {
				t.Errorf("gone's waiting request: %v, want a rejection that names the removed identity", err)
			}
			// gone's slot is free, and keep is held to its new classes.
			if _, err := admitClass(keep, "default"); !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), `may not use class "default"`) {
				t.Errorf("keep, default after the reload: %v, want refused", err)
			}
			l, err := admitClass(keep, "premium")
			if err != nil {
				t.Fatalf("keep, premium in gone's freed slot: %v", err)
			}
			l.Release(scheduler.Done)
			if _, err := admitClass(gone, "default"); !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), "belongs to no identity") {
				t.Errorf("gone after the reload: %v, want its token refused", err)
			}

			// rot's token changes (the identities do not): putting them
			// in place again closes rot's session and frees its slot.
			if err := os.WriteFile(filepath.Join(dir, "rot.token"), []byte("rot-new\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if closed, err := svc.ReplaceIdentities(load(reloadIdentitiesV2)); closed != 1 || err != nil {
				t.Fatalf("ReplaceIdentities again: %d session(s) closed, %v; want 1 (rot's)", closed, err)
			}
			waitMetric(t, metricsURL, `llmesh_scheduler_inflight{pool="gpu"} 1`) // keep's only
			if _, err := admitClass(rot, "default"); !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), "belongs to no identity") {
				t.Errorf("rot with its old token: %v, want refused", err)
			}
			rotNew := identityClient(t, addr, tr, client.Options{Token: "rot-new"})
			if l, err := admitClass(rotNew, "default"); err != nil {
				t.Errorf("rot with its new token: %v", err)
			} else {
				l.Release(scheduler.Done)
			}
		})
	}
}
