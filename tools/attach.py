#!/usr/bin/env python3
"""Scan an unmodified LibTorch binary from outside.

    python3 tools/attach.py --output report.json [--signal USR1] [--trace trace.json] -- ./server args...

Preloads libtorchscan_attach.so into the binary, which scans every thread's
ATen work from before main() and writes the scan report (JSON, kind
"torchscan_scan_report") to --output when the process exits normally and each
time --signal arrives. --trace: it also times every call (holding every
call, as --hold-calls does) and, after the final report, writes the scan as
a Chrome / Perfetto trace there. Before running the binary it checks that
the binary is dynamically linked against LibTorch and that its torch
version and C++ ABI match the library's; otherwise it refuses and says why.

The report's layer rows are aggregated across requests ("aggregate": one
row per module call of a request and call signature, with its call count
and summed metrics, the distribution of the requests' totals and the
requests whose shapes or totals differ from the common case), so its size
and the server's memory do not grow with the requests served.
--per-request-layers [N] also keeps the last N requests' own rows.

The launcher becomes the binary (exec, same pid). From the moment it has
parsed its arguments, --signal sent to that pid no longer kills it: the
signal waits until the library is ready and then writes a report.
"""
import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = ("USR1", "USR2", "HUP", "WINCH")


def default_library() -> Path:
    # tools/setup.sh installs it beside libtorchscan.so.0, the engine it uses.
    return ROOT / "python_shim/torchscan/_lib/libtorchscan_attach.so"


def torch_libraries(binary: str) -> dict:
    """soname -> resolved path of the LibTorch libraries the binary loads."""
    res = subprocess.run(["ldd", binary], capture_output=True, text=True)
    found = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] in ("libc10.so", "libtorch_cpu.so", "libtorch.so") and "=>" in parts:
            found[parts[0]] = parts[parts.index("=>") + 1]
    return found


def compatibility_problem(probe: dict) -> str:
    """Why the library cannot attach to the process the probe ran in ('' when it can)."""
    built = probe["built_against"].split("+")[0]
    if probe["loaded"] != built:
        return (f"the binary runs torch {probe['loaded']} but this TorchScan library was built against torch "
                f"{probe['built_against']}; rebuild TorchScan against the binary's torch "
                "(TORCHSCAN_PYTHON=<python with that torch> bash tools/setup.sh)")
    if probe["loaded_abi"] != probe["library_abi"]:
        return (f"the binary's LibTorch uses _GLIBCXX_USE_CXX11_ABI={probe['loaded_abi']} but this TorchScan "
                f"library was built with _GLIBCXX_USE_CXX11_ABI={probe['library_abi']}; rebuild TorchScan "
                "against a LibTorch with the binary's ABI")
    return ""


def hold_signal(name: str) -> bool:
    """Blocks the report signal in this process; True if it was not blocked already.

    Its default action (terminate; WINCH: ignore) would otherwise apply until
    the library's handler is installed: through the probe run here and, in
    the binary, from exec through LibTorch's static initialisers (about
    0.1-0.2 s). The process keeps the blocked mask across exec and a
    pending signal too, so a signal sent to this pid at any time from here
    on -- to the launcher or to the binary it becomes -- is delivered to the
    library's handler once that unblocks it. With exec there is no separate
    child to forward signals to, and the binary keeps the pid the user
    started. A signal sent before this point (while Python starts) still
    has its default action.
    """
    signo = getattr(signal, f"SIG{name}")
    already = signal.pthread_sigmask(signal.SIG_BLOCK, {signo})
    return signo not in already


def check(binary: str, command: list, env: dict) -> None:
    """Refuses, saying why, unless the library will attach to the binary.

    Nothing here runs the binary's own code: the loader's trace mode
    (LD_TRACE_LOADED_OBJECTS, as ldd) lists what would load, preload
    included, without running any initialiser; only then does the probe run
    the binary, and the library, which loaded in the trace, ends the probe
    before main().
    """
    mode = os.stat(binary).st_mode
    if mode & (stat.S_ISUID | stat.S_ISGID):
        refuse(f"{binary} is set-user-ID or set-group-ID: the loader ignores LD_PRELOAD for it")
    if not torch_libraries(binary):
        refuse(f"{binary} is not dynamically linked against LibTorch (ldd finds no libc10.so / "
               "libtorch_cpu.so). A statically linked binary cannot be scanned from outside; for a wrapper "
               "command (taskset, a shell script) or a host that loads LibTorch with dlopen, pass --wrapper, "
               "or run the launcher under the wrapper: taskset -c 0 python3 tools/attach.py ... -- ./server")
    try:
        trace = subprocess.run([binary, *command[1:]], env={**env, "LD_TRACE_LOADED_OBJECTS": "1"},
                               capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        refuse(f"the loader's trace of {binary} did not finish in 60 s")
    missing = [l.strip() for l in trace.stdout.splitlines() if "not found" in l]
    if "cannot be preloaded" in trace.stderr or missing or trace.returncode != 0:
        refuse(f"the library could not be loaded into {binary}:\n" + "\n".join([trace.stderr.strip(), *missing]))
    # Probe: the library reports the torch the binary really loads, then the
    # process leaves before main().
    try:
        probe_run = subprocess.run([binary, *command[1:]], env={**env, "TORCHSCAN_ATTACH_PROBE": "1"},
                                   capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        refuse(f"the probe run of {binary} did not report in 120 s (it was killed)")
    lines = [l for l in probe_run.stdout.splitlines() if l.startswith("TORCHSCAN_PROBE ")]
    if not lines:
        refuse(f"the library could not be loaded into {binary}:\n{probe_run.stderr.strip()}")
    problem = compatibility_problem(json.loads(lines[-1].split(" ", 1)[1]))
    if problem:
        refuse(problem)


def refuse(message: str) -> NoReturn:
    print(f"torchscan attach: refusing: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        usage="%(prog)s --output REPORT.json [--signal USR1] [--trace TRACE.json] -- BINARY [ARGS...]")
    parser.add_argument("--output", required=True, help="where the report is written (replaced atomically)")
    parser.add_argument("--signal", choices=SIGNALS, help="also write the report each time this signal arrives")
    parser.add_argument("--trace", metavar="PATH",
                        help="also time every call and write the scan as a Chrome / Perfetto trace (JSON) here "
                             "when the final report is written (implies --hold-calls: a trace needs every call)")
    parser.add_argument("--library", type=Path, default=None, help="libtorchscan_attach.so to preload")
    parser.add_argument("--report-on-sigterm", action="store_true",
                        help="on SIGTERM (a container's stop signal), write the report, then end as SIGTERM does")
    parser.add_argument("--wrapper", action="store_true",
                        help="the command is not itself a LibTorch binary: a wrapper (taskset, a shell script) "
                             "that runs one, or a host that loads LibTorch later with dlopen. Skips the checks "
                             "and preloads libtorchscan_preload.so, which attaches once LibTorch is in a process; "
                             "the attach library still refuses another torch when it loads")
    parser.add_argument("--hold-calls", action="store_true",
                        help="keep every recorded call until the report (a full scan) instead of folding calls "
                             "into the report's sums as requests finish (streaming, the default)")
    parser.add_argument("--per-request-layers", nargs="?", const="all", metavar="N",
                        help="besides the layer rows aggregated across requests (one per module call of a request "
                             "and call signature, the report's \"aggregate\"), keep the layer rows and totals of "
                             "the last N requests in \"layers\" and \"requests\"; no N: every request's (the "
                             "report then grows with the requests served)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- BINARY [ARGS...]")
    args = parser.parse_args(argv)
    held = hold_signal(args.signal) if args.signal else False
    term_held = hold_signal("TERM") if args.report_on_sigterm else False
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the binary to run after --, e.g. -- ./server --port 8000")
    if args.per_request_layers is not None and args.per_request_layers != "all" and (
            not args.per_request_layers.isdigit() or int(args.per_request_layers) < 1):
        parser.error(f"--per-request-layers {args.per_request_layers!r}: give a number of requests (1 or more), "
                     "or no value for every request")
    if args.trace is not None and (not args.trace or os.path.isdir(args.trace)):
        parser.error(f"--trace {args.trace!r}: give the file the trace is written to")
    if args.trace is not None and os.path.realpath(args.trace) == os.path.realpath(args.output):
        parser.error(f"--output and --trace name the same file ({args.output}); give the trace its own file")
    # Before the server starts: the library writes each report to a temporary
    # file beside the target and renames it, so the folder must be writable.
    for flag, path in (("--output", args.output), ("--trace", args.trace)):
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            parser.error(f"{flag} {path} is a directory; give the file the report is written to")
        if not os.path.isdir(folder):
            parser.error(f"{flag} {path}: its directory {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            parser.error(f"{flag} {path}: its directory {folder} is not writable")
    # Absolute, symlinks kept: a link to a directory without spaces is the
    # way to attach from one whose real path has them.
    library = Path(os.path.abspath(args.library or default_library()))
    if not library.exists():
        refuse(f"{library} does not exist; build it with `bash tools/setup.sh` or pass --library")
    if any(c in str(library) for c in " :\t\n"):
        refuse(f"{library}: LD_PRELOAD splits paths at spaces and colons and cannot carry this one; "
               "install TorchScan under a path without them, or pass --library through a symlink that has none")
    binary = shutil.which(command[0]) or command[0]
    if not os.path.isfile(binary) or not os.access(binary, os.X_OK):
        refuse(f"{command[0]} is not an executable file")

    env = dict(os.environ)
    if args.wrapper:
        # No check can see the LibTorch binary behind a wrapper or a later
        # dlopen: the libraries decide when they load (the attach library
        # prints why it does not attach, and the program runs unscanned).
        library = library.parent / "libtorchscan_preload.so"
        if not library.exists():
            refuse(f"{library} does not exist; build it with `bash tools/setup.sh`")
        env["LD_PRELOAD"] = ":".join(p for p in (str(library), env.get("LD_PRELOAD", "")) if p)
    else:
        env["LD_PRELOAD"] = ":".join(p for p in (str(library), env.get("LD_PRELOAD", "")) if p)
        check(binary, command, env)

    env["TORCHSCAN_ATTACH_OUTPUT"] = str(Path(args.output).resolve())
    if args.trace is not None:
        env["TORCHSCAN_ATTACH_TRACE"] = str(Path(args.trace).resolve())
    if args.signal:
        env["TORCHSCAN_ATTACH_SIGNAL"] = args.signal
        if held:
            env["TORCHSCAN_ATTACH_SIGNAL_HELD"] = "1"  # the library unblocks it
    if args.hold_calls:
        env["TORCHSCAN_ATTACH_STREAMING"] = "0"
    if args.per_request_layers is not None:
        env["TORCHSCAN_ATTACH_PER_REQUEST_LAYERS"] = args.per_request_layers
    if args.report_on_sigterm:
        env["TORCHSCAN_ATTACH_REPORT_ON_TERM"] = "1"
        if term_held:
            env["TORCHSCAN_ATTACH_TERM_HELD"] = "1"
    # exec: the binary keeps this process id, so signals sent to it arrive.
    os.execve(binary, [command[0], *command[1:]], env)
    return 1


if __name__ == "__main__":
    sys.exit(main())
