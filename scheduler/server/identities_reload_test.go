package server_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/framed"
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

// goneSession is a session of the identity the reload removes, opened on
// transport tr without the client library, so the test sees the status
// that ends it.
type goneSession interface {
	Send(*schedulerv1.SessionRequest) error
	Recv() (*schedulerv1.SessionResponse, error)
}

func openGoneSession(t *testing.T, ctx context.Context, addr, tr, token string) goneSession {
	t.Helper()
	if tr == client.TransportFramed {
		c, err := framed.DialToken(ctx, addr, nil, token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	st, err := sessionAPI(t, addr).Session(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// wantRevoked checks that err is the status a revoked identity's stream
// ends with.
func wantRevoked(t *testing.T, what string, err error) {
	t.Helper()
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || !strings.HasPrefix(st.Message(), "scheduler: ") ||
		!strings.Contains(st.Message(), "identity gone: ") {
		t.Errorf("%s ended with %v, want code = Unauthenticated desc = scheduler: … identity gone: …", what, err)
	}
}

// ReplaceIdentities (a reloaded identities file): every stream of an
// identity that was removed is closed at once, with UNAUTHENTICATED
// (sessions on either transport, idle or not, and the older protocol's
// Admit streams, admitted or waiting), its waiting requests rejected with
// why and its slots freed; an identity that changed is held to the new
// entry; and a session whose token no longer proves its identity is
// closed when the same identities are put in place again (a reload forced
// by SIGHUP, or one caused by a changed token file).
// cmd/llmesh/schedserve tests the file watcher and hangup around it.
func TestIdentitiesReload(t *testing.T) {
	for _, tr := range []string{client.TransportFramed, client.TransportGRPC} {
		t.Run(tr, func(t *testing.T) {
			// Runs after every other cleanup (the clients' Close): whatever
			// the revocations started has ended.
			leaks := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, leaks) })
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
			svc, addr := startService(t, strings.Replace(twoClassMesh, "max_inflight: 4", "max_inflight: 5", 1),
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
			// gone also holds a lease on a session that sends nothing more,
			// and one on an Admit stream (the older protocol, over gRPC
			// beside either transport's sessions).
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			idle := openGoneSession(t, ctx, addr, tr, "gone-token")
			if err := idle.Send(&schedulerv1.SessionRequest{Leases: []*schedulerv1.LeaseRequest{start1(1)}}); err != nil {
				t.Fatal(err)
			}
			if m, err := idle.Recv(); err != nil || m.GetLeases()[0].GetAdmitted() == nil {
				t.Fatalf("gone's idle session: %v, %v; want admitted", m, err)
			}
			tokenCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer gone-token")
			api := sessionAPI(t, addr)
			admitStream := func(class string) schedulerv1.Scheduler_AdmitClient {
				t.Helper()
				s, err := api.Admit(tokenCtx)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Send(&schedulerv1.AdmitRequest{Msg: &schedulerv1.AdmitRequest_Start{Start: &schedulerv1.Start{Pool: "gpu", Class: class}}}); err != nil {
					t.Fatal(err)
				}
				return s
			}
			admitted := admitStream("default")
			if m, err := admitted.Recv(); err != nil || m.GetAdmitted() == nil {
				t.Fatalf("gone's Admit stream: %v, %v; want admitted", m, err)
			}
			// The pool is full: gone's next requests wait, one on its
			// session and one on an Admit stream.
			waiting := make(chan error, 1)
			go func() {
				l, err := admitClass(gone, "premium")
				if err == nil {
					l.Release(scheduler.Done)
				}
				waiting <- err
			}()
			waitingStream := admitStream("premium")
			waitMetric(t, metricsURL, `llmesh_scheduler_queued{class="premium",pool="gpu"} 2`)
			waitMetric(t, metricsURL, `llmesh_scheduler_service_sessions 4`)

			written := time.Now()
			if closed, err := svc.ReplaceIdentities(load(reloadIdentitiesV2)); closed != 4 || err != nil {
				t.Fatalf("ReplaceIdentities: %d session(s) closed, %v; want 4 (gone's two sessions and two Admit streams)", closed, err)
			}
			if err := <-waiting; !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), "identity gone") {
				t.Errorf("gone's waiting request: %v, want a rejection that names the removed identity", err)
			}
			// Each stream of gone ends at once with the status, though
			// the clients send nothing (each receive would otherwise wait
			// for ctx's 10 s).
			_, err = idle.Recv()
			wantRevoked(t, "gone's idle session", err)
			_, err = admitted.Recv()
			wantRevoked(t, "gone's admitted Admit stream", err)
			m, err := waitingStream.Recv()
			if m != nil {
				t.Errorf("gone's waiting Admit stream was answered %v", m)
			}
			wantRevoked(t, "gone's waiting Admit stream", err)
			t.Logf("gone's streams ended %v after ReplaceIdentities was called", time.Since(written).Round(time.Millisecond))
			// Their slots are free and their sessions have ended (on
			// gRPC, the receiver that outlives the handler has ended the
			// session too): keep's and rot's remain.
			waitMetric(t, metricsURL, `llmesh_scheduler_inflight{pool="gpu"} 2`)
			waitMetric(t, metricsURL, `llmesh_scheduler_service_sessions 2`)
			// keep is held to its new classes, in gone's freed slots.
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
