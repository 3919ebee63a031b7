// Package natsserver runs throwaway NATS servers with JetStream for tests,
// from the nats-server binary on this machine (Debian's nats-server
// package, which `make test` installs): a free port on 127.0.0.1, a
// storage directory kept across restarts, and stop, kill and start again.
// A server gets a parent-death signal, so it goes away with its test
// binary.
package natsserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// InstallHint tells a person how to get nats-server.
const InstallHint = "install it with `sudo apt-get install -y nats-server` (Debian/Ubuntu), or put nats-server on PATH"

// Server is one nats-server with JetStream. Its methods are safe for
// concurrent use.
type Server struct {
	bin  string
	dir  string
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Binary finds nats-server: PATH first, then /usr/sbin (Debian's place,
// off a normal user's PATH).
func Binary() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server", nil
	}
	return "", errors.New("natsserver: nats-server not found; " + InstallHint)
}

// Start starts a new server in a new temporary directory and waits until
// it accepts connections.
func Start() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "coffer-nats-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{bin: bin, dir: dir, port: port}
	if err := s.Start(); err != nil {
		s.Remove()
		return nil, err
	}
	return s, nil
}

// URL is the server's client URL.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts a stopped server again, with its streams, on the same
// port. Starting a running server is a no-op.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		select {
		case <-s.done:
		default:
			return nil
		}
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "nats.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(s.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", filepath.Join(s.dir, "js"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("natsserver: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			raw, _ := os.ReadFile(filepath.Join(s.dir, "nats.log"))
			return fmt.Errorf("natsserver: nats-server exited at start: %s", raw)
		default:
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("natsserver: nats-server did not listen within 30s")
}

// Stop shuts the server down (SIGTERM) and waits; Kill is a crash
// (SIGKILL). Stored messages survive both.
func (s *Server) Stop() error { return s.signal(syscall.SIGTERM) }

// Kill stops the server as a crash would.
func (s *Server) Kill() error { return s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("natsserver: not stopped within 30s of %v; killed", sig)
	}
}

// Remove stops the server and deletes its directory.
func (s *Server) Remove() {
	_ = s.Kill()
	_ = os.RemoveAll(s.dir)
}
