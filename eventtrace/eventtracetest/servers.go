// Package eventtracetest starts real database servers for tests: PostgreSQL and MariaDB from
// Debian's packages, each in a temporary directory on a free loopback port with its unix
// socket beside its data, one per test binary (Main stops them), one fresh database per test.
// Run as root (CI is), the servers run as the packages' postgres and mysql users, since
// initdb refuses root.
package eventtracetest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/ejcloud/ejcloud/internal/freeport"
)

// InstallHint is how to get the servers; `make test` runs it when they are missing.
const InstallHint = "apt-get install postgresql mariadb-server (make databases)"

type server struct {
	once sync.Once
	err  error
	dir  string
	cmd  *exec.Cmd
	exit chan struct{}
	port int
	stop func()
}

var (
	pg, maria server
	dbs       atomic.Int64
)

// Main runs the tests, then stops the servers that were started.
func Main(m *testing.M) int {
	code := m.Run()
	for _, s := range []*server{&pg, &maria} {
		if s.stop != nil {
			s.stop()
		}
	}
	return code
}

// Postgres returns the DSN of a new, empty database on the test binary's PostgreSQL server,
// starting the server first if needed.
func Postgres(t testing.TB) string {
	t.Helper()
	pg.once.Do(func() { pg.err = pg.startPostgres() })
	if pg.err != nil {
		t.Fatalf("start PostgreSQL: %v", pg.err)
	}
	name := fmt.Sprintf("t%d", dbs.Add(1))
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
	create(t, "pgx", admin, "CREATE DATABASE "+name)
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", pg.port, name)
}

// MariaDB returns the DSN (mysql:// form) of a new, empty database on the test binary's MariaDB
// server, starting the server first if needed.
func MariaDB(t testing.TB) string {
	t.Helper()
	maria.once.Do(func() { maria.err = maria.startMariaDB() })
	if maria.err != nil {
		t.Fatalf("start MariaDB: %v", maria.err)
	}
	name := fmt.Sprintf("t%d", dbs.Add(1))
	create(t, "mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", maria.port), "CREATE DATABASE "+name)
	return fmt.Sprintf("mysql://root@tcp(127.0.0.1:%d)/%s", maria.port, name)
}

func create(t testing.TB, driver, dsn, stmt string) {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// serviceUser is the account a server runs as: the package's own when we are root.
func serviceUser(name string) (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, os.Getuid(), os.Getgid(), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("running as root, the server needs the %s user that Debian's package creates: %w (%s)", name, err, InstallHint)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}

// tempDir is a directory the service user owns, under a parent it may traverse.
func (s *server) tempDir(prefix string, uid, gid int) error {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	s.dir = dir
	for _, sub := range []string{"data", "run"} {
		p := filepath.Join(dir, sub)
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func run(cred *syscall.Credential, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(name), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// serve starts the server process in its own process group; stop ends it (signal, then the
// group killed if it has not exited within 20 s) and removes its directory.
func (s *server) serve(cred *syscall.Credential, sig syscall.Signal, logFile, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	log, err := os.Create(logFile)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	s.cmd, s.exit = cmd, make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(s.exit) }()
	s.stop = func() {
		syscall.Kill(-cmd.Process.Pid, sig)
		select {
		case <-s.exit:
		case <-time.After(20 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-s.exit
		}
		os.RemoveAll(s.dir)
	}
	return nil
}

// ready waits until driver answers a ping at dsn, the server exits, or a minute passes.
func (s *server) ready(driver, dsn, logFile string) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exit:
			b, _ := os.ReadFile(logFile)
			return fmt.Errorf("the server exited: %s", bytes.TrimSpace(b))
		case <-time.After(100 * time.Millisecond): // polling a server that is starting up
		}
		if time.Now().After(deadline) {
			s.stop()
			b, _ := os.ReadFile(logFile)
			return fmt.Errorf("no answer within a minute: %v: %s", err, bytes.TrimSpace(b))
		}
	}
}

// postgresBin finds a PostgreSQL program: Debian keeps them in /usr/lib/postgresql/<v>/bin.
func postgresBin(name string) (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	if len(dirs) > 0 {
		return dirs[0], nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("PostgreSQL's %s is not installed: run `%s`", name, InstallHint)
}

func version(p string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
	return v
}

func (s *server) startPostgres() error {
	initdb, err := postgresBin("initdb")
	if err != nil {
		return err
	}
	postgres, err := postgresBin("postgres")
	if err != nil {
		return err
	}
	cred, uid, gid, err := serviceUser("postgres")
	if err != nil {
		return err
	}
	if err := s.tempDir("ejcloud-pg-", uid, gid); err != nil {
		return err
	}
	data := filepath.Join(s.dir, "data")
	if err := run(cred, initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(s.dir)
		return err
	}
	if s.port, err = freeport.Port(); err != nil {
		return err
	}
	logFile := filepath.Join(s.dir, "postgres.log")
	if err := s.serve(cred, syscall.SIGINT, logFile, postgres, "-D", data, "-p", strconv.Itoa(s.port), "-h", "127.0.0.1",
		"-k", filepath.Join(s.dir, "run"), "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"); err != nil {
		os.RemoveAll(s.dir)
		return err
	}
	return s.ready("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port), logFile)
}

func (s *server) startMariaDB() error {
	mariadbd, err := exec.LookPath("mariadbd")
	if err != nil {
		if mariadbd, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			return fmt.Errorf("MariaDB is not installed: run `%s`", InstallHint)
		}
	}
	installDB, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		return fmt.Errorf("mariadb-install-db is not installed: run `%s`", InstallHint)
	}
	_, uid, gid, err := serviceUser("mysql")
	if err != nil {
		return err
	}
	if err := s.tempDir("ejcloud-maria-", uid, gid); err != nil {
		return err
	}
	data := filepath.Join(s.dir, "data")
	common := []string{"--no-defaults", "--datadir=" + data}
	if os.Geteuid() == 0 {
		common = append(common, "--user=mysql") // mariadbd drops root itself
	}
	if err := run(nil, installDB, append(common, "--auth-root-authentication-method=normal", "--skip-test-db")...); err != nil {
		os.RemoveAll(s.dir)
		return err
	}
	if s.port, err = freeport.Port(); err != nil {
		return err
	}
	logFile := filepath.Join(s.dir, "mariadb.log")
	run := filepath.Join(s.dir, "run")
	if err := s.serve(nil, syscall.SIGTERM, logFile, mariadbd, append(common, "--port="+strconv.Itoa(s.port), "--bind-address=127.0.0.1",
		"--socket="+filepath.Join(run, "mysqld.sock"), "--pid-file="+filepath.Join(run, "mysqld.pid"), "--skip-log-bin",
		"--innodb-buffer-pool-size=32M", "--innodb-flush-log-at-trx-commit=0", "--skip-name-resolve")...); err != nil {
		os.RemoveAll(s.dir)
		return err
	}
	return s.ready("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", s.port), logFile)
}
