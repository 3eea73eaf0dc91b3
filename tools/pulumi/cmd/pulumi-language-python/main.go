// Command pulumi-language-python is a minimal Pulumi language host for Python programs.
//
// Upstream's host lives in its own Go module (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3)
// that has no release tags and is not served by the Go module proxy this project builds from, so the engine
// gets this one instead. It implements what `pulumi preview/up/destroy/refresh` need from a language host:
// the handshake, plugin info, the required-packages query (answered with none: the providers are found on
// PATH and loaded when the program registers resources) and Run, which starts the Python SDK's own
// `pulumi-language-python-exec` (installed next to this binary by tools/build.sh) with the interpreter of
// the project's virtual environment, and RunPlugin, which runs a Python policy pack the same way. Code
// generation, `pulumi new` templates and dependency installation are not supported and answer with a clear
// error.
//
// The interpreter is chosen as upstream does for the plain pip toolchain: runtime option `virtualenv` in
// Pulumi.yaml (relative to the project root), else $PULUMI_PYTHON_CMD, else python3 on PATH.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// execScript is the Python SDK's program runner, expected next to this binary.
const execScript = "pulumi-language-python-exec"

// bailExitCode is what the runner exits with after it has already shown the user an actionable message.
const bailExitCode = 32

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	mu            sync.Mutex
	engineAddress string
	tracing       string
	execPath      string
}

func (h *host) engine() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.engineAddress
}

func (h *host) Handshake(
	_ context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if req.GetEngineAddress() != "" {
		h.engineAddress = req.GetEngineAddress()
	}
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

func (h *host) GetRequiredPlugins(
	context.Context, *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

func (h *host) GetRequiredPackages(
	context.Context, *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	return &pulumirpc.GetRequiredPackagesResponse{}, nil
}

func (h *host) InstallDependencies(
	*pulumirpc.InstallDependenciesRequest, grpc.ServerStreamingServer[pulumirpc.InstallDependenciesResponse],
) error {
	return status.Error(codes.Unimplemented,
		"this Python language host does not install dependencies: create the virtual environment first "+
			"(make venv)")
}

// python returns the interpreter for a program and the environment additions that go with it.
func python(info *pulumirpc.ProgramInfo) (string, []string, error) {
	if opts := info.GetOptions(); opts != nil {
		if v, ok := opts.AsMap()["virtualenv"].(string); ok && v != "" {
			venv := v
			if !filepath.IsAbs(venv) {
				venv = filepath.Join(info.GetRootDirectory(), venv)
			}
			py := filepath.Join(venv, "bin", "python")
			if _, err := os.Stat(py); err != nil {
				return "", nil, fmt.Errorf("runtime option virtualenv=%q: no interpreter at %s "+
					"(create the virtual environment first, e.g. make venv)", v, py)
			}
			return py, []string{
				"VIRTUAL_ENV=" + venv,
				"PATH=" + filepath.Join(venv, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
			}, nil
		}
	}
	if cmd := os.Getenv("PULUMI_PYTHON_CMD"); cmd != "" {
		return cmd, nil, nil
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		return "", nil, errors.New("no Python interpreter: set runtime option virtualenv in Pulumi.yaml, " +
			"or PULUMI_PYTHON_CMD, or put python3 on PATH")
	}
	return py, nil, nil
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	info := req.GetInfo()
	py, extraEnv, err := python(info)
	if err != nil {
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}

	program := req.GetProgram()
	if info != nil && info.GetProgramDirectory() != "" {
		program = filepath.Join(info.GetProgramDirectory(), info.GetEntryPoint())
	}
	if program == "" {
		program = "."
	}

	args := []string{"-u", h.execPath}
	add := func(name, value string) {
		if value != "" {
			args = append(args, "--"+name, value)
		}
	}
	add("monitor", req.GetMonitorAddress())
	add("engine", h.engine())
	add("project", req.GetProject())
	add("stack", req.GetStack())
	add("pwd", req.GetPwd())
	add("dry_run", strconv.FormatBool(req.GetDryRun()))
	add("parallel", strconv.Itoa(int(req.GetParallel())))
	add("tracing", h.tracing)
	add("organization", req.GetOrganization())
	if info != nil {
		add("root_directory", info.GetRootDirectory())
	}
	args = append(args, program)
	args = append(args, req.GetArgs()...)

	config, err := json.Marshal(req.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("encoding the stack config: %w", err)
	}
	secretKeys := req.GetConfigSecretKeys()
	if secretKeys == nil {
		secretKeys = []string{}
	}
	secrets, err := json.Marshal(secretKeys)
	if err != nil {
		return nil, fmt.Errorf("encoding the secret config keys: %w", err)
	}

	cmd := exec.CommandContext(ctx, py, args...) //nolint:gosec // the interpreter and runner are ours
	cmd.Dir = req.GetPwd()
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Env = append(cmd.Env,
		"PULUMI_CONFIG="+string(config),
		"PULUMI_CONFIG_SECRET_KEYS="+string(secrets),
	)

	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return &pulumirpc.RunResponse{Error: fmt.Sprintf("cannot start %s: %v", py, err)}, nil
		}
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return &pulumirpc.RunResponse{
				Error: fmt.Sprintf("the Python program was terminated by signal %v", ws.Signal()),
			}, nil
		}
		if exitErr.ExitCode() == bailExitCode {
			return &pulumirpc.RunResponse{Bail: true}, nil
		}
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("the Python program exited with code %d", exitErr.ExitCode()),
		}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// RunPlugin runs a Python plugin — for this project, the CrossGuard policy pack of `pulumi preview
// --policy-pack policies`: `python <plugin dir> <args...>` with the interpreter of the plugin's own runtime
// options (policies/PulumiPolicy.yaml names the project's virtual environment), its output streamed back to
// the engine and its exit code reported as upstream's host does.
func (h *host) RunPlugin(
	req *pulumirpc.RunPluginRequest, server grpc.ServerStreamingServer[pulumirpc.RunPluginResponse],
) error {
	py, extraEnv, err := python(req.GetInfo())
	if err != nil {
		return err
	}
	args := append([]string{req.GetInfo().GetProgramDirectory()}, req.GetArgs()...)
	closer, stdout, stderr, err := rpcutil.MakeRunPluginStreams(server, false)
	if err != nil {
		return err
	}
	defer closer.Close()

	cmd := exec.CommandContext(server.Context(), py, args...) //nolint:gosec // the plugin dir comes from the engine
	cmd.Dir = req.GetPwd()
	cmd.Env = append(append(os.Environ(), req.GetEnv()...), extraEnv...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok {
				return server.Send(&pulumirpc.RunPluginResponse{
					Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: int32(ws.ExitStatus())},
				})
			}
		}
		return fmt.Errorf("running the Python plugin in %s: %w", req.GetInfo().GetProgramDirectory(), err)
	}
	return closer.Close()
}

func main() {
	flags := flag.NewFlagSet("pulumi-language-python", flag.ContinueOnError)
	tracing := flags.String("tracing", "", "emit tracing to a Zipkin-compatible endpoint")
	// Passed by the engine to every plugin; this host logs nothing beyond its errors.
	flags.Bool("logtostderr", false, "log to stderr (accepted, unused)")
	flags.Bool("logflow", false, "flow logging settings to child processes (accepted, unused)")
	flags.Int("v", 0, "log verbosity (accepted, unused)")
	// Options of upstream's host that the engine may pass through from Pulumi.yaml.
	flags.String("virtualenv", "", "(accepted, unused: use the runtime option)")
	flags.String("toolchain", "", "(accepted, only pip is supported)")
	flags.String("typechecker", "", "(accepted, unused)")
	flags.String("root", "", "(accepted, unused)")
	flags.Bool("use-executor", false, "(accepted, unused)")
	if err := flags.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}

	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-language-python: cannot locate own binary:", err)
		os.Exit(1)
	}
	execPath := filepath.Join(filepath.Dir(self), execScript)
	if _, err := os.Stat(execPath); err != nil {
		fmt.Fprintf(os.Stderr, "pulumi-language-python: %s not found next to this binary (%s); "+
			"rebuild with tools/build.sh\n", execScript, execPath)
		os.Exit(1)
	}

	h := &host{tracing: *tracing, execPath: execPath}
	if flags.NArg() > 0 {
		h.engineAddress = flags.Arg(0)
	}

	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, h)
			return nil
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-language-python: cannot start the gRPC server:", err)
		os.Exit(1)
	}
	// The engine reads the port from the first line of stdout.
	fmt.Println(handle.Port)
	if err := <-handle.Done; err != nil && !strings.Contains(err.Error(), "closed") {
		fmt.Fprintln(os.Stderr, "pulumi-language-python:", err)
		os.Exit(1)
	}
}
